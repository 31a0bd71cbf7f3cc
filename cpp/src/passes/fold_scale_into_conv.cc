// Div(X, c) or Mul(X, c) by a static float32 scalar c, read only by a Conv
// as its input X, becomes Conv(X, W / c) (or W * c): conv(X / c, W) =
// conv(X, W / c), bias unchanged, zero padding still zero. Policies that take
// uint8 frames divide them by 255 before the first Conv; this removes that
// pass over the whole input (the largest tensor of the model at large
// batches). The folded weight is an ordinary node over the original W and c,
// so the static program recomputes it on refit.
#include <cmath>

#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

namespace {

// The one float32 element of static value v, if it is a finite, nonzero
// scalar of rank <= max_rank (so broadcasting with W keeps W's shape).
bool ScalarOperand(const Graph& g, int v, size_t max_rank) {
  const Value& val = g.values[v];
  if (!val.data || val.data->dtype() != DType::kFloat32 || val.data->size() != 1) return false;
  if (val.data->shape().size() > max_rank) return false;
  const float f = val.data->As<float>()[0];
  return std::isfinite(f) && f != 0.f;
}

}  // namespace

int FoldScaleIntoConv(Graph* g) {
  int fired = 0;
  std::vector<int> uses = UseCounts(*g);
  std::vector<bool> is_static = StaticValues(*g);
  std::vector<int> reader(g->values.size(), -1);  // the last node reading each value
  for (size_t i = 0; i < g->nodes.size(); ++i)
    for (int in : g->nodes[i].inputs)
      if (in >= 0) reader[in] = static_cast<int>(i);

  const size_t original = g->nodes.size();
  for (size_t si = 0; si < original; ++si) {
    const Node& scale = g->nodes[si];
    const bool div = scale.op_type == "Div";
    if ((!div && scale.op_type != "Mul") || !scale.domain.empty() || scale.num_inputs() != 2 ||
        scale.outputs.size() != 1 || scale.inputs[0] < 0 || scale.inputs[1] < 0)
      continue;
    const int out = scale.outputs[0];
    if (out < 0 || uses[out] != 1 || IsGraphOutput(*g, out) || reader[out] < 0) continue;
    const Node& conv = g->nodes[reader[out]];
    if (conv.op_type != "Conv" || !conv.domain.empty() || conv.inputs[0] != out ||
        !conv.HasInput(1) || !is_static[conv.inputs[1]])
      continue;
    const Value& w = g->values[conv.inputs[1]];
    size_t w_rank = 0;
    if (w.data && w.data->dtype() == DType::kFloat32) {
      w_rank = w.data->shape().size();
    } else if (w.has_shape && w.dtype == DType::kFloat32) {
      w_rank = w.dims.size();
    } else {
      continue;
    }
    // Div takes c second; Mul either way round. X is then float32 too (Div
    // and Mul take one type; it is unknown here before shape inference).
    int x = scale.inputs[0], c = scale.inputs[1];
    if (!div && !is_static[c] && is_static[x]) std::swap(x, c);
    if (!is_static[c] || is_static[x] || !ScalarOperand(*g, c, w_rank)) continue;
    const DType xt = g->values[x].dtype;
    if (xt != DType::kFloat32 && xt != DType::kUndefined) continue;

    const int conv_index = reader[out];
    const std::string name = g->nodes[conv_index].name + "_scaled_W";
    const int folded = AddOp(g, div ? "Div" : "Mul", {g->nodes[conv_index].inputs[1], c}, name);
    Node& conv_ref = g->nodes[conv_index];  // AddOp may reallocate nodes
    conv_ref.inputs[0] = x;
    conv_ref.inputs[1] = folded;
    MarkRemoved(&g->nodes[si]);
    ++fired;
  }
  if (fired) RemoveMarkedNodes(g);
  return fired;
}

}  // namespace kaiwu
