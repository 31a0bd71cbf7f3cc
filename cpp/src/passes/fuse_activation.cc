// Conv/Gemm/MatMul followed by an elementwise activation: the producer's kernel
// applies the activation as it writes its output (attribute "_kaiwu_act").
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

namespace {

bool ReadScalar(const Graph& g, int v, float* out) {
  if (v < 0) return false;
  const Value& val = g.values[v];
  if (val.kind != ValueKind::kConstant || !val.data || val.data->size() != 1) return false;
  if (val.data->dtype() != DType::kFloat32) return false;
  *out = val.data->As<float>()[0];
  return true;
}

// Activation name and its two parameters, or false if the node is not fusable.
bool ActivationOf(const Graph& g, const Node& n, std::string* act, float* alpha, float* beta) {
  const std::string& op = n.op_type;
  *alpha = 0.f;
  *beta = 0.f;
  if (op == "Relu" || op == "Tanh" || op == "Sigmoid" || op == "HardSwish") {
    *act = op;
    return true;
  }
  if (op == "LeakyRelu") {
    *act = op;
    *alpha = n.GetFloat("alpha", 0.01f);
    return true;
  }
  if (op == "HardSigmoid") {
    *act = op;
    *alpha = n.GetFloat("alpha", 0.2f);
    *beta = n.GetFloat("beta", 0.5f);
    return true;
  }
  if (op == "Clip") {
    *act = op;
    *alpha = -3.402823466e38f;
    *beta = 3.402823466e38f;
    if (n.HasInput(1) && !ReadScalar(g, n.inputs[1], alpha)) return false;
    if (n.HasInput(2) && !ReadScalar(g, n.inputs[2], beta)) return false;
    return true;
  }
  return false;
}

}  // namespace

int FuseActivation(Graph* g) {
  int fired = 0;
  std::vector<int> uses = UseCounts(*g);
  std::vector<int> producer(g->values.size(), -1);
  for (size_t i = 0; i < g->nodes.size(); ++i)
    for (int o : g->nodes[i].outputs)
      if (o >= 0) producer[o] = static_cast<int>(i);
  for (Node& act : g->nodes) {
    std::string name;
    float alpha, beta;
    if (act.inputs.empty() || act.inputs[0] < 0 || !ActivationOf(*g, act, &name, &alpha, &beta)) continue;
    int x = act.inputs[0];
    if (producer[x] < 0 || uses[x] != 1 || IsGraphOutput(*g, x)) continue;
    Node& prod = g->nodes[producer[x]];
    if (prod.op_type != "Conv" && prod.op_type != "Gemm" && prod.op_type != "MatMul") continue;
    if (prod.Has("_kaiwu_act") || prod.outputs.size() != 1) continue;
    Attribute a;
    a.kind = Attribute::Kind::kString;
    a.s = name;
    prod.attrs["_kaiwu_act"] = a;
    Attribute fa;
    fa.kind = Attribute::Kind::kFloats;
    fa.floats = {alpha, beta};
    prod.attrs["_kaiwu_act_params"] = fa;
    prod.outputs[0] = act.outputs[0];
    MarkRemoved(&act);
    ++fired;
  }
  if (fired) RemoveMarkedNodes(g);
  return fired;
}

}  // namespace kaiwu
