// Shape inference of BatchNormalization InstanceNormalization LayerNormalization.
#include "ops/norm.h"

#include <algorithm>

#include "ops/op_registry.h"

namespace kaiwu {
namespace {

// X float32, or float16 / bfloat16 with parameters in X's dtype or float32
// (one dtype for all of them): the dtypes the parameter inputs may have.
std::initializer_list<DType> ParamDTypes(const OpContext& ctx) {
  static const std::initializer_list<DType> f32 = {DType::kFloat32};
  static const std::initializer_list<DType> f16 = {DType::kFloat16, DType::kFloat32};
  static const std::initializer_list<DType> bf16 = {DType::kBFloat16, DType::kFloat32};
  ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  switch (ctx.in(0).dtype) {
    case DType::kFloat16: return f16;
    case DType::kBFloat16: return bf16;
    default: return f32;
  }
}

// Parameter input i: of ParamDTypes, and of input `first`'s dtype.
void CheckParamDType(const OpContext& ctx, int i, int first) {
  ctx.ExpectDType(i, ParamDTypes(ctx));
  if (i != first && ctx.in(i).dtype != ctx.in(first).dtype)
    ctx.Error("input ", i, " has dtype ", DTypeName(ctx.in(i).dtype), ", input ", first, " has ",
              DTypeName(ctx.in(first).dtype));
}

// Checks X [N, C, ...] and that inputs first..last are [C] (dtypes: ParamDTypes).
void CheckChannelInputs(const OpContext& ctx, int first, int last) {
  ParamDTypes(ctx);
  const Shape& x = ctx.in(0).shape;
  if (x.size() < 2) ctx.Error("X must have rank >= 2, got ", ShapeToString(x));
  for (int i = first; i <= last; ++i) {
    CheckParamDType(ctx, i, first);
    if (ctx.in(i).shape != Shape{x[1]})
      ctx.Error("input ", i, " must have shape [", x[1], "], got ", ShapeToString(ctx.in(i).shape));
  }
}

// Y = scale * (X - mean) / sqrt(var + epsilon) + B, per channel (inference only).
void InferBatchNorm(OpContext& ctx) {
  if (ctx.node.GetInt("training_mode", 0) != 0)
    ctx.Error("training_mode=1 is not supported (inference only)");
  for (size_t i = 1; i < ctx.node.outputs.size(); ++i)
    if (ctx.node.outputs[i] >= 0) ctx.Error("only the Y output is supported (inference only)");
  if (ctx.num_inputs() != 5) ctx.Error("expects 5 inputs, got ", ctx.num_inputs());
  CheckChannelInputs(ctx, 1, 4);
  ctx.SetParams<NormParams>().epsilon = ctx.node.GetFloat("epsilon", 1e-5f);
  ctx.SetOutput(0, ctx.in(0).dtype, ctx.in(0).shape);
}

// The same with statistics per (n, c) plane.
void InferInstanceNorm(OpContext& ctx) {
  if (ctx.num_inputs() != 3) ctx.Error("expects 3 inputs, got ", ctx.num_inputs());
  CheckChannelInputs(ctx, 1, 2);
  const Shape& x = ctx.in(0).shape;
  if (x.size() < 3) ctx.Error("X must have rank >= 3, got ", ShapeToString(x));
  ctx.SetParams<NormParams>().epsilon = ctx.node.GetFloat("epsilon", 1e-5f);
  ctx.SetOutput(0, ctx.in(0).dtype, x);
}

// Input i's shape without leading 1s beyond the normalised rank, after
// checking that it broadcasts to the normalised shape.
Shape BroadcastToNormShape(const OpContext& ctx, int i, const Shape& norm_shape) {
  Shape s = ctx.in(i).shape;
  while (s.size() > norm_shape.size() && s.front() == 1) s.erase(s.begin());
  bool ok = s.size() <= norm_shape.size();
  for (size_t d = 0; ok && d < s.size(); ++d) {
    int64_t nd = norm_shape[norm_shape.size() - s.size() + d];
    ok = s[d] == nd || s[d] == 1;
  }
  if (!ok)
    ctx.Error("input ", i, " of shape ", ShapeToString(ctx.in(i).shape),
              " does not broadcast to the normalised shape ", ShapeToString(norm_shape));
  return s;
}

// LayerNormalization: normalises over the dims from `axis` on, then applies
// Scale and the optional B (broadcast to X.shape[axis:]). The optional Mean
// and InvStdDev outputs have shape X.shape[:axis] + [1] * (rank - axis).
void InferLayerNorm(OpContext& ctx) {
  CheckParamDType(ctx, 1, 1);
  const Shape& x = ctx.in(0).shape;
  const int64_t rank = static_cast<int64_t>(x.size());
  if (rank < 1) ctx.Error("X must have rank >= 1");
  LayerNormParams& p = ctx.SetParams<LayerNormParams>();
  p.axis = NormalizeAxis(ctx, ctx.node.GetInt("axis", -1), rank);
  p.epsilon = ctx.node.GetFloat("epsilon", 1e-5f);
  p.norm_shape.assign(x.begin() + p.axis, x.end());
  p.scale_shape = BroadcastToNormShape(ctx, 1, p.norm_shape);
  p.has_bias = ctx.HasInput(2);
  if (p.has_bias) {
    CheckParamDType(ctx, 2, 1);
    p.bias_shape = BroadcastToNormShape(ctx, 2, p.norm_shape);
  }
  ctx.SetOutput(0, ctx.in(0).dtype, x);
  const int num_outputs = std::min<int>(3, static_cast<int>(ctx.outputs.size()));
  Shape stat_shape(x.begin(), x.begin() + p.axis);
  stat_shape.resize(rank, 1);
  for (int i = 1; i < num_outputs; ++i) ctx.SetOutput(i, DType::kFloat32, stat_shape);
}

}  // namespace

void RegisterNormOps(OpRegistry& r) {
  r.Define(OpId::kBatchNormalization, &InferBatchNorm);
  r.Define(OpId::kInstanceNormalization, &InferInstanceNorm);
  r.Define(OpId::kLayerNormalization, &InferLayerNorm);
}

}  // namespace kaiwu
