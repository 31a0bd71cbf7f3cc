// Chains of elementwise float ops become one FusedElementwise node (domain
// "kaiwu") that streams memory once instead of once per op. A chain link is a
// unary op (Relu Sigmoid Tanh Exp Neg Abs Sqrt LeakyRelu, Clip with constant
// bounds) or Add/Sub/Mul/Div whose other operand is a float32 weight or
// constant; each link's value feeds only the next link. The operands stay node
// inputs (read at run time), so refit reaches them. The chain must be float32:
// some operand is a float32 tensor (ONNX then requires the data to be one too)
// or the chain input is declared float32. At least two links are fused.
#include "ops/binary.h"
#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

namespace {

struct Link {
  int node;
  std::string op;
  int operand = -1;  // value id of a binary op's other operand
  bool swapped = false;
  float p0 = 0, p1 = 0;
};

bool FloatData(const Graph& g, int v) {
  return v >= 0 && g.values[v].data && g.values[v].data->dtype() == DType::kFloat32 &&
         (g.values[v].kind == ValueKind::kWeight || g.values[v].kind == ValueKind::kConstant);
}

bool ScalarFloat(const Graph& g, int v, float* out) {
  std::vector<float> f;
  if (!ConstFloats(g, v, &f) || f.size() != 1) return false;
  *out = f[0];
  return true;
}

// The link made by node `i` when `in` is its chained input, or false.
bool AsLink(const Graph& g, int i, int in, Link* l) {
  const Node& n = g.nodes[i];
  if (!n.domain.empty() || n.outputs.size() != 1 || n.outputs[0] < 0) return false;
  if (!FusedElementwiseSupports(n.op_type)) return false;
  *l = Link{i, n.op_type};
  const std::string& op = n.op_type;
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    if (n.num_inputs() != 2 || n.inputs[0] == n.inputs[1]) return false;
    int k = n.inputs[0] == in ? 1 : (n.inputs[1] == in ? 0 : -1);
    if (k < 0 || !FloatData(g, n.inputs[k])) return false;
    l->operand = n.inputs[k];
    l->swapped = k == 0;
    return true;
  }
  if (n.num_inputs() < 1 || n.inputs[0] != in) return false;
  if (op == "Clip") {
    l->p0 = -3.402823466e38f;
    l->p1 = 3.402823466e38f;
    if (n.Has("min")) l->p0 = n.GetFloat("min", l->p0);
    if (n.Has("max")) l->p1 = n.GetFloat("max", l->p1);
    if (n.HasInput(1) && !ScalarFloat(g, n.inputs[1], &l->p0)) return false;
    if (n.HasInput(2) && !ScalarFloat(g, n.inputs[2], &l->p1)) return false;
    return true;
  }
  if (op == "LeakyRelu") l->p0 = n.GetFloat("alpha", 0.01f);
  return n.num_inputs() == 1;
}

}  // namespace

int FuseElementwise(Graph* g) {
  int fired = 0;
  const std::vector<int> uses = UseCounts(*g);
  const std::vector<bool> is_static = StaticValues(*g);
  const auto consumers = g->Consumers();
  std::vector<bool> taken(g->nodes.size(), false);
  const size_t original = g->nodes.size();
  for (size_t i = 0; i < original; ++i) {
    if (taken[i] || g->nodes[i].num_inputs() < 1) continue;
    // Try each input as the chain's data input.
    std::vector<Link> chain;
    int x = -1;
    for (int cand : g->nodes[i].inputs) {
      Link l;
      if (cand < 0 || is_static[cand] || !AsLink(*g, static_cast<int>(i), cand, &l)) continue;
      x = cand;
      chain = {l};
      break;
    }
    if (chain.empty()) continue;
    // Extend while the value has one reader that is a link.
    for (;;) {
      int v = g->nodes[chain.back().node].outputs[0];
      if (uses[v] != 1 || IsGraphOutput(*g, v) || consumers[v].size() != 1) break;
      int next = consumers[v][0];
      Link l;
      if (taken[next] || !AsLink(*g, next, v, &l)) break;
      chain.push_back(l);
    }
    if (chain.size() < 2) continue;
    bool is_float = g->values[x].dtype == DType::kFloat32;
    for (const Link& l : chain) is_float = is_float || l.operand >= 0;
    if (!is_float) continue;
    Node fused;
    fused.op_type = "FusedElementwise";
    fused.domain = "kaiwu";
    fused.opset = 1;
    fused.name = g->nodes[chain.front().node].name + "_fused";
    fused.inputs = {x};
    Attribute ops, operand, swapped, params;
    ops.kind = Attribute::Kind::kStrings;
    operand.kind = swapped.kind = Attribute::Kind::kInts;
    params.kind = Attribute::Kind::kFloats;
    for (const Link& l : chain) {
      ops.strings.push_back(l.op);
      int idx = 0;
      if (l.operand >= 0) {
        fused.inputs.push_back(l.operand);
        idx = static_cast<int>(fused.inputs.size()) - 1;
      }
      operand.ints.push_back(idx);
      swapped.ints.push_back(l.swapped ? 1 : 0);
      params.floats.push_back(l.p0);
      params.floats.push_back(l.p1);
    }
    fused.attrs = {{"ops", ops}, {"operand", operand}, {"swapped", swapped}, {"params", params}};
    fused.outputs = {g->nodes[chain.back().node].outputs[0]};
    for (const Link& l : chain) {
      taken[l.node] = true;
      MarkRemoved(&g->nodes[l.node]);
    }
    g->AddNode(std::move(fused));
    ++fired;
  }
  if (fired) RemoveMarkedNodes(g);
  return fired;
}

}  // namespace kaiwu
