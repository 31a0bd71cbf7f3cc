// Shape inference of Conv MaxPool AveragePool GlobalMaxPool GlobalAveragePool,
// and of their channels-last forms NhwcConv and NhwcMaxPool.
#include "ops/conv.h"

#include <vector>

#include "ops/op_registry.h"

namespace kaiwu {
namespace {

// Conv (1-D to 3-D, groups, dilations, auto_pad), float32, float16 or bfloat16
// (X, W and B of one type).
void InferConv(OpContext& ctx) {
  ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  const DType dtype = ctx.in(0).dtype;
  ctx.ExpectDType(1, {dtype});
  const Shape& x = ctx.in(0).shape;
  const Shape& w = ctx.in(1).shape;
  if (x.size() < 3 || x.size() > 5) ctx.Error("X must have rank 3 to 5, got ", ShapeToString(x));
  if (w.size() != x.size())
    ctx.Error("W ", ShapeToString(w), " must have the rank of X ", ShapeToString(x));
  const int64_t n = x[0], c = x[1], m = w[0];
  ConvParams& p = ctx.SetParams<ConvParams>();
  p.group = ctx.node.GetInt("group", 1);
  if (p.group < 1 || c % p.group != 0 || m % p.group != 0 || w[1] * p.group != c)
    ctx.Error("group ", p.group, " does not fit X ", ShapeToString(x), " and W ", ShapeToString(w));
  std::vector<int64_t> kernel(w.begin() + 2, w.end());
  if (ctx.node.Has("kernel_shape") && ctx.node.GetInts("kernel_shape") != kernel)
    ctx.Error("kernel_shape does not match W ", ShapeToString(w));
  p.geo = MakeGeometry(ctx, Shape(x.begin() + 2, x.end()), kernel, /*allow_ceil=*/false);
  p.act = FusedActivation::FromNode(ctx.node);
  p.has_bias = ctx.HasInput(2);
  if (p.has_bias) {
    ctx.ExpectDType(2, {dtype});
    if (ctx.in(2).shape != Shape{m}) ctx.Error("B must have shape [", m, "]");
  }
  Shape out = {n, m};
  for (int64_t d : p.geo.OutShape()) out.push_back(d);
  ctx.SetOutput(0, dtype, out);
}

// MaxPool (with its optional int64 Indices output) and AveragePool (1-D to
// 3-D, pads/auto_pad, dilations, ceil_mode, count_include_pad).
template <bool kMax>
void InferPool(OpContext& ctx) {
  bool indices = false, col_major = false;
  if (kMax) {
    ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kUInt8,
                        DType::kFloat16, DType::kBFloat16});
    indices = ctx.node.outputs.size() > 1 && ctx.node.outputs[1] >= 0;
    const int64_t order = ctx.node.GetInt("storage_order", 0);
    if (order != 0 && order != 1) ctx.Error("storage_order must be 0 or 1, got ", order);
    col_major = order == 1;
  } else {
    ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16});
  }
  const DType dtype = ctx.in(0).dtype;
  const Shape& x = ctx.in(0).shape;
  if (x.size() < 3 || x.size() > 5) ctx.Error("X must have rank 3 to 5, got ", ShapeToString(x));
  if (!ctx.node.Has("kernel_shape")) ctx.Error("missing attribute 'kernel_shape'");
  PoolParams& p = ctx.SetParams<PoolParams>();
  p.indices = indices;
  p.col_major = col_major;
  p.geo = MakeGeometry(ctx, Shape(x.begin() + 2, x.end()), ctx.node.GetInts("kernel_shape"),
                       /*allow_ceil=*/true);
  Shape out = {x[0], x[1]};
  for (int64_t d : p.geo.OutShape()) out.push_back(d);
  ctx.SetOutput(0, dtype, out);
  if (indices) ctx.SetOutput(1, DType::kInt64, out);
  if (!kMax) p.include_pad = ctx.node.GetInt("count_include_pad", 0) != 0;
}

// GlobalMaxPool / GlobalAveragePool: one value per (n, c) plane.
template <bool kMax>
void InferGlobalPool(OpContext& ctx) {
  ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16});
  const Shape& x = ctx.in(0).shape;
  if (x.size() < 3) ctx.Error("X must have rank >= 3, got ", ShapeToString(x));
  if (kMax && NumElements(Shape(x.begin() + 2, x.end())) == 0)
    ctx.Error("GlobalMaxPool of an empty plane");
  Shape out = {x[0], x[1]};
  out.resize(x.size(), 1);
  ctx.SetOutput(0, ctx.in(0).dtype, out);
}

// NhwcConv (domain kaiwu; made by passes/layout_nhwc.cc): Conv's attributes
// and math on channels-last tensors, 2-D only: X [N, H, W, C],
// W [M, KH, KW, C / group], optional B [M] -> Y [N, OH, OW, M]; CPU sessions may add
// input 3 (packed W) and input 4 (added to Y before the activation), and may
// feed X as uint8 with W float32 (fuse_cast_into_nhwc_conv: the Cast to float32
// done by the conv as it reads X).
void InferNhwcConv(OpContext& ctx) {
  ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kUInt8});
  const DType dtype = ctx.in(0).dtype == DType::kUInt8 ? DType::kFloat32 : ctx.in(0).dtype;
  ctx.ExpectDType(1, {dtype});
  const Shape& x = ctx.in(0).shape;
  const Shape& w = ctx.in(1).shape;
  if (x.size() != 4) ctx.Error("X must have rank 4 (N, H, W, C), got ", ShapeToString(x));
  if (w.size() != 4) ctx.Error("W must have rank 4 (M, KH, KW, C / group), got ", ShapeToString(w));
  const int64_t n = x[0], c = x[3], m = w[0];
  ConvParams& p = ctx.SetParams<ConvParams>();
  p.group = ctx.node.GetInt("group", 1);
  if (p.group < 1 || c % p.group != 0 || m % p.group != 0 || w[3] * p.group != c)
    ctx.Error("group ", p.group, " does not fit X ", ShapeToString(x), " and W ", ShapeToString(w));
  const std::vector<int64_t> kernel = {w[1], w[2]};
  if (ctx.node.Has("kernel_shape") && ctx.node.GetInts("kernel_shape") != kernel)
    ctx.Error("kernel_shape does not match W ", ShapeToString(w));
  p.geo = MakeGeometry(ctx, Shape{x[1], x[2]}, kernel, /*allow_ceil=*/false);
  p.act = FusedActivation::FromNode(ctx.node);
  p.has_bias = ctx.HasInput(2);
  if (p.has_bias) {
    ctx.ExpectDType(2, {dtype});
    if (ctx.in(2).shape != Shape{m}) ctx.Error("B must have shape [", m, "]");
  }
  // CPU sessions (PrepackNhwcConvWeights, passes/prepack_gemm.cc): input 3 is W packed into the
  // column panels of the packed GEMM, [ceil(M / 16), KH * KW * C / group, 16].
  if (ctx.HasInput(3)) {
    ctx.ExpectDType(3, {DType::kFloat32});
    const Shape want = {(m + 15) / 16, w[1] * w[2] * w[3], 16};
    if (ctx.in(3).shape != want)
      ctx.Error("packed W must have shape ", ShapeToString(want), ", got ",
                ShapeToString(ctx.in(3).shape));
  }
  const Shape o = p.geo.OutShape();
  const Shape y = {n, o[0], o[1], m};
  // CPU sessions (FuseNhwcConvAdd, passes/fuse_conv_add.cc): input 4 is a
  // tensor of Y's shape added before the activation (a residual connection).
  if (ctx.HasInput(4)) {
    ctx.ExpectDType(4, {dtype});
    if (ctx.in(4).shape != y)
      ctx.Error("the added input must have Y's shape ", ShapeToString(y), ", got ",
                ShapeToString(ctx.in(4).shape));
  }
  ctx.SetOutput(0, dtype, y);
}

// NhwcMaxPool (domain kaiwu): MaxPool's attributes (no Indices output) on a
// channels-last 2-D tensor X [N, H, W, C] -> Y [N, OH, OW, C].
void InferNhwcMaxPool(OpContext& ctx) {
  ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kUInt8, DType::kInt8});
  const Shape& x = ctx.in(0).shape;
  if (x.size() != 4) ctx.Error("X must have rank 4 (N, H, W, C), got ", ShapeToString(x));
  if (!ctx.node.Has("kernel_shape")) ctx.Error("missing attribute 'kernel_shape'");
  if (ctx.node.outputs.size() > 1 && ctx.node.outputs[1] >= 0) ctx.Error("has no Indices output");
  PoolParams& p = ctx.SetParams<PoolParams>();
  p.geo = MakeGeometry(ctx, Shape{x[1], x[2]}, ctx.node.GetInts("kernel_shape"), /*allow_ceil=*/true);
  const Shape o = p.geo.OutShape();
  ctx.SetOutput(0, ctx.in(0).dtype, Shape{x[0], o[0], o[1], x[3]});
}

}  // namespace

void RegisterConvOps(OpRegistry& r) {
  r.Define(OpId::kConv, &InferConv);
  r.Define(OpId::kMaxPool, &InferPool<true>);
  r.Define(OpId::kAveragePool, &InferPool<false>);
  r.Define(OpId::kGlobalMaxPool, &InferGlobalPool<true>);
  r.Define(OpId::kGlobalAveragePool, &InferGlobalPool<false>);
  r.Define(OpId::kNhwcConv, &InferNhwcConv);
  r.Define(OpId::kNhwcMaxPool, &InferNhwcMaxPool);
}

}  // namespace kaiwu
