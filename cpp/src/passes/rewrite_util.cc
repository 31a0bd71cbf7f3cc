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

int AddInts(Graph* g, std::vector<int64_t> vals, const std::string& name_hint) {
  Tensor t(DType::kInt64, {static_cast<int64_t>(vals.size())});
  for (size_t i = 0; i < vals.size(); ++i) t.As<int64_t>()[i] = vals[i];
  return AddConstant(g, std::move(t), name_hint);
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

bool StaticScalar(const Graph& g, const std::vector<bool>& st, int v) {
  if (v < 0 || !st[v] || !g.values[v].has_shape) return false;
  for (const Dim& d : g.values[v].dims)
    if (d.value != 1) return false;
  return true;
}

void ForgetShape(Graph* g, int v) {
  g->values[v].has_shape = false;
  g->values[v].dims.clear();
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

bool KnownDims(const Graph& g, int v, std::vector<int64_t>* dims) {
  const Value& val = g.values[v];
  dims->clear();
  if (val.data) {
    *dims = val.data->shape();
    return true;
  }
  if (!val.has_shape) return false;
  for (const Dim& d : val.dims) {
    if (d.value < 0) return false;
    dims->push_back(d.value);
  }
  return true;
}

bool StaticDims(const Graph& g, const std::vector<int>& producer, int v,
                std::vector<int64_t>* dims) {
  std::vector<std::vector<int64_t>> perms;  // applied last to first
  for (int hops = 0; hops < 8 && v >= 0; ++hops) {
    if (KnownDims(g, v, dims)) {
      for (auto it = perms.rbegin(); it != perms.rend(); ++it) {
        if (it->size() != dims->size()) return false;
        std::vector<int64_t> d(dims->size());
        for (size_t k = 0; k < d.size(); ++k) {
          const int64_t from = (*it)[k];
          if (from < 0 || from >= static_cast<int64_t>(d.size())) return false;
          d[k] = (*dims)[from];
        }
        *dims = d;
      }
      return true;
    }
    const int p = producer[v];
    if (p < 0 || g.nodes[p].inputs.empty() || !g.nodes[p].domain.empty()) return false;
    const Node& n = g.nodes[p];
    if (n.op_type == "Transpose") {
      perms.push_back(n.GetInts("perm"));
    } else if (n.op_type != "Mul" && n.op_type != "Div" && n.op_type != "Cast") {
      return false;
    }
    v = n.inputs[0];
  }
  return false;
}

int SoleDequantize(const Graph& g, const std::vector<int>& producer, const std::vector<int>& uses,
                   const std::vector<bool>& st, int v) {
  if (v < 0 || producer[v] < 0 || uses[v] != 1 || IsGraphOutput(g, v)) return -1;
  const Node& dq = g.nodes[producer[v]];
  if (dq.op_type != "DequantizeLinear" || !dq.domain.empty() || dq.outputs.size() != 1 ||
      dq.GetInt("block_size", 0) != 0 || !dq.HasInput(1) || !StaticScalar(g, st, dq.inputs[1]) ||
      (dq.HasInput(2) && !StaticScalar(g, st, dq.inputs[2])))
    return -1;
  return producer[v];
}

void HoistAboveDequantize(Graph* g, int op, int dq, DType x_dtype) {
  Node& o = g->nodes[op];
  Node& d = g->nodes[dq];
  const int x = d.inputs[0], mid = o.inputs[0], out = o.outputs[0];
  // x -> op -> mid -> dq -> out
  o.inputs[0] = x;
  o.outputs[0] = mid;
  d.inputs[0] = mid;
  d.outputs[0] = out;
  g->values[mid].dtype = x_dtype;  // now quantized bytes
  ForgetShape(g, mid);
}

}  // namespace kaiwu
