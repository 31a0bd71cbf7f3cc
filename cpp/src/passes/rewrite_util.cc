#include "passes/rewrite_util.h"

#include <algorithm>

namespace kaiwu {

namespace {
std::string FreshName(const Graph& g, const std::string& hint) {
  std::string name = hint;
  for (int i = 1; g.Find(name) >= 0; ++i) name = hint + "_" + std::to_string(i);
  return name;
}
}  // namespace

int AddConstant(Graph* g, Tensor t, const std::string& name_hint) {
  Value v;
  v.name = FreshName(*g, name_hint);
  v.kind = ValueKind::kConstant;
  v.dtype = t.dtype();
  v.has_shape = true;
  for (int64_t d : t.shape()) v.dims.push_back(Dim{d, ""});
  v.data = std::make_shared<Tensor>(std::move(t));
  return g->AddValue(std::move(v));
}

int AddIntermediate(Graph* g, const std::string& name_hint) {
  Value v;
  v.name = FreshName(*g, name_hint);
  return g->AddValue(std::move(v));
}

int AddOp(Graph* g, const std::string& op_type, std::vector<int> inputs, const std::string& name_hint) {
  int out = AddIntermediate(g, name_hint);
  Node n;
  n.op_type = op_type;
  n.name = g->values[out].name;
  n.opset = g->opset;
  n.inputs = std::move(inputs);
  n.outputs = {out};
  g->AddNode(std::move(n));
  return out;
}

Attribute IntAttr(int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::kInt;
  a.i = v;
  return a;
}

Attribute IntsAttr(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Attribute::Kind::kInts;
  a.ints = std::move(v);
  return a;
}

void ReplaceUses(Graph* g, int from, int to) {
  for (Node& n : g->nodes)
    for (int& in : n.inputs)
      if (in == from) in = to;
  for (int& o : g->outputs)
    if (o == from) o = to;
}

std::vector<int> UseCounts(const Graph& g) {
  std::vector<int> uses(g.values.size(), 0);
  for (const Node& n : g.nodes)
    for (int in : n.inputs)
      if (in >= 0) uses[in]++;
  for (int o : g.outputs) uses[o]++;
  return uses;
}

std::vector<bool> StaticValues(const Graph& g) {
  std::vector<bool> st(g.values.size(), false);
  for (size_t v = 0; v < g.values.size(); ++v)
    st[v] = g.values[v].kind == ValueKind::kWeight || g.values[v].kind == ValueKind::kConstant;
  for (const Node& n : g.nodes) {  // nodes are topologically sorted
    bool all = true;
    for (int in : n.inputs)
      if (in >= 0) all = all && st[in];
    if (all)
      for (int o : n.outputs)
        if (o >= 0) st[o] = true;
  }
  return st;
}

bool IsGraphOutput(const Graph& g, int v) {
  return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end();
}

void MarkRemoved(Node* n) {
  n->op_type = "_removed";
  n->inputs.clear();
  n->outputs.clear();
}

void RemoveMarkedNodes(Graph* g) {
  std::vector<Node> kept;
  for (Node& n : g->nodes)
    if (n.op_type != "_removed") kept.push_back(std::move(n));
  g->nodes = std::move(kept);
  g->Verify();
}

}  // namespace kaiwu
