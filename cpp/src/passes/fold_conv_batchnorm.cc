// Conv(X, W, B) -> BatchNormalization(scale, bias, mean, var, eps) becomes
// Conv(X, W', B') with, per output channel c,
//   s[c]  = scale[c] / sqrt(var[c] + eps)
//   W'[c] = W[c] * s[c]
//   B'[c] = (B[c] - mean[c]) * s[c] + bias[c]
// W' and B' are produced by ordinary nodes over the original weights, so the
// static program recomputes them whenever a refit changes any of them.
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

int FoldConvBatchNorm(Graph* g) {
  int fired = 0;
  std::vector<int> uses = UseCounts(*g);
  std::vector<bool> is_static = StaticValues(*g);
  std::vector<int> producer(g->values.size(), -1);
  for (size_t i = 0; i < g->nodes.size(); ++i)
    for (int o : g->nodes[i].outputs)
      if (o >= 0) producer[o] = static_cast<int>(i);

  const size_t original = g->nodes.size();
  for (size_t bi = 0; bi < original; ++bi) {
    Node& bn = g->nodes[bi];
    if (bn.op_type != "BatchNormalization" || bn.num_inputs() != 5) continue;
    if (bn.GetInt("training_mode", 0) != 0) continue;
    if (bn.outputs.size() > 1) {
      bool extra = false;
      for (size_t o = 1; o < bn.outputs.size(); ++o) extra = extra || bn.outputs[o] >= 0;
      if (extra) continue;
    }
    int conv_out = bn.inputs[0];
    if (conv_out < 0 || producer[conv_out] < 0 || uses[conv_out] != 1) continue;
    Node& conv = g->nodes[producer[conv_out]];
    if (conv.op_type != "Conv" || !conv.HasInput(1) || !is_static[conv.inputs[1]]) continue;
    if (conv.HasInput(2) && !is_static[conv.inputs[2]]) continue;
    bool params_static = true;
    for (int i = 1; i < 5; ++i) params_static = params_static && bn.inputs[i] >= 0 && is_static[bn.inputs[i]];
    if (!params_static) continue;
    const Value& w = g->values[conv.inputs[1]];
    if (!w.has_shape || w.dims.empty()) continue;  // rank needed for the reshape
    const int64_t w_rank = static_cast<int64_t>(w.dims.size());  // g->values grows below
    const std::string base = conv.name + "_bn";
    const int scale = bn.inputs[1], bias = bn.inputs[2], mean = bn.inputs[3], var = bn.inputs[4];
    Tensor eps_t(DType::kFloat32, {});
    eps_t.As<float>()[0] = bn.GetFloat("epsilon", 1e-5f);
    int eps = AddConstant(g, std::move(eps_t), base + "_eps");
    Tensor shape_t(DType::kInt64, {w_rank});
    shape_t.As<int64_t>()[0] = -1;
    for (int64_t d = 1; d < w_rank; ++d) shape_t.As<int64_t>()[d] = 1;
    int wshape = AddConstant(g, std::move(shape_t), base + "_wshape");

    int var_eps = AddOp(g, "Add", {var, eps}, base + "_var_eps");
    int stddev = AddOp(g, "Sqrt", {var_eps}, base + "_std");
    int s = AddOp(g, "Div", {scale, stddev}, base + "_s");
    int s_col = AddOp(g, "Reshape", {s, wshape}, base + "_s_col");
    int w_folded = AddOp(g, "Mul", {g->nodes[producer[conv_out]].inputs[1], s_col}, base + "_W");
    int centered;
    Node& conv_ref = g->nodes[producer[conv_out]];  // AddOp may reallocate nodes
    if (conv_ref.HasInput(2)) {
      centered = AddOp(g, "Sub", {conv_ref.inputs[2], mean}, base + "_centered");
    } else {
      centered = AddOp(g, "Neg", {mean}, base + "_centered");
    }
    int scaled = AddOp(g, "Mul", {centered, s}, base + "_scaled");
    int b_folded = AddOp(g, "Add", {scaled, bias}, base + "_B");

    Node& conv2 = g->nodes[producer[conv_out]];
    conv2.inputs.resize(3);
    conv2.inputs[1] = w_folded;
    conv2.inputs[2] = b_folded;
    Node& bn2 = g->nodes[bi];
    int bn_out = bn2.outputs[0];
    // The Conv now writes the BatchNorm's output value directly.
    for (int& o : conv2.outputs)
      if (o == conv_out) o = bn_out;
    MarkRemoved(&bn2);
    ++fired;
  }
  if (fired) RemoveMarkedNodes(g);
  return fired;
}

}  // namespace kaiwu
