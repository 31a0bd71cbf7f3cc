// Shape inference of Softmax LogSoftmax Hardmax: the input's shape, and the
// [outer, n, inner] view around the axis every backend computes over.
#include "ops/op_registry.h"
#include "ops/unary.h"

namespace kaiwu {
namespace {

void InferSoftmax(OpContext& ctx) {
  ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16});
  const Shape& shape = ctx.in(0).shape;
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (rank == 0) ctx.Error("input must have rank >= 1");
  const bool legacy = ctx.node.opset > 0 && ctx.node.opset < 13;
  const int64_t axis = NormalizeAxis(ctx, ctx.node.GetInt("axis", legacy ? 1 : -1), rank);
  SoftmaxParams& p = ctx.SetParams<SoftmaxParams>();
  for (int64_t d = 0; d < rank; ++d) {
    if (d < axis) p.outer *= shape[d];
    else if (d == axis || legacy) p.n *= shape[d];
    else p.inner *= shape[d];
  }
  ctx.SetOutput(0, ctx.in(0).dtype, shape);
}

}  // namespace

void RegisterSoftmaxOps(OpRegistry& r) {
  for (OpId op : {OpId::kSoftmax, OpId::kLogSoftmax, OpId::kHardmax}) r.Define(op, &InferSoftmax);
}

}  // namespace kaiwu
