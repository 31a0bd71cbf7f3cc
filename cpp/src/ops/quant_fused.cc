// Shape inference of the optimizer's integer nodes (domain "kaiwu"):
// QPackWeights (static: weights, scales, zero points and bias -> one packed
// operand) and QLinearFused (an integer Conv or Gemm/MatMul over it), made by
// passes/fuse_qdq.cc.
#include <vector>

#include "ops/op_registry.h"
#include "ops/quant.h"

namespace kaiwu {
namespace {

// A scalar operand: size 1.
void ExpectScalar(const OpContext& ctx, int i, const char* what) {
  if (ctx.HasInput(i) && ctx.in(i).size() != 1)
    ctx.Error(what, " must have one element, got ", ShapeToString(ctx.in(i).shape));
}

DType FusedOutputDType(const OpContext& ctx) {
  const int64_t code = ctx.node.GetInt("y_dtype", 2);
  if (code == 1) return DType::kFloat32;
  if (code == 2) return DType::kUInt8;
  if (code == 3) return DType::kInt8;
  ctx.Error("y_dtype must be 1 (float), 2 (uint8) or 3 (int8), got ", code);
}

// QPackWeights(w int8, w_scale, w_zp?, x_scale, x_zp?, bias?, y_scale?, y_zp?) -> uint8 [bytes].
void InferQPackWeights(OpContext& ctx) {
  ctx.ExpectInputs(4, 8);
  ctx.ExpectDType(0, {DType::kInt8});
  ctx.ExpectDType(1, {DType::kFloat32});
  ctx.ExpectDType(3, {DType::kFloat32});
  QPackParams& p = ctx.SetParams<QPackParams>();
  const Shape& w = ctx.in(0).shape;
  p.trans = ctx.node.GetInt("trans", 1) != 0;
  if (w.size() < 2 || (!p.trans && w.size() != 2))
    ctx.Error("the weight must be [n, k...] (trans) or [k, n], got ", ShapeToString(w));
  p.n = p.trans ? w[0] : w[1];
  p.k = p.trans ? NumElements(Shape(w.begin() + 1, w.end())) : w[0];
  const int64_t ws = ctx.in(1).size();
  if (ws != 1 && ws != p.n) ctx.Error("w_scale must have 1 or ", p.n, " elements");
  p.w_per_channel = ws != 1;
  if (ctx.HasInput(2)) {
    ctx.ExpectDType(2, {DType::kInt8});
    if (ctx.in(2).size() != ws) ctx.Error("w_zero_point must have w_scale's size");
  }
  ExpectScalar(ctx, 3, "x_scale");
  if (ctx.HasInput(4)) {
    ctx.ExpectDType(4, {DType::kUInt8, DType::kInt8});
    ExpectScalar(ctx, 4, "x_zero_point");
    p.x_dtype = ctx.in(4).dtype;
  }
  p.has_bias = ctx.HasInput(5);
  if (p.has_bias) {
    ctx.ExpectDType(5, {DType::kFloat32});
    if (ctx.in(5).size() != p.n) ctx.Error("the bias must have ", p.n, " elements");
  }
  p.has_y = ctx.HasInput(6);
  p.y_dtype = DType::kFloat32;
  if (p.has_y) {
    ctx.ExpectDType(6, {DType::kFloat32});
    ExpectScalar(ctx, 6, "y_scale");
    p.y_dtype = DType::kUInt8;
    if (ctx.HasInput(7)) {
      ctx.ExpectDType(7, {DType::kUInt8, DType::kInt8});
      ExpectScalar(ctx, 7, "y_zero_point");
      p.y_dtype = ctx.in(7).dtype;
    }
  }
  p.k_rows = ctx.node.GetInt("k_rows", 1);
  p.row_bytes = ctx.node.GetInt("row_bytes", 0);
  p.k_packed = p.k;
  if (p.row_bytes != 0) {
    if (!p.trans || p.k_rows <= 0 || p.k % p.k_rows != 0 || p.row_bytes < p.k / p.k_rows || p.row_bytes % 4 != 0)
      ctx.Error("row_bytes=", p.row_bytes, " with k_rows=", p.k_rows, " must be a multiple of 4 holding k / k_rows (k=",
                p.k, ") of a transposed weight");
    p.k_packed = p.k_rows * p.row_bytes;
  }
  p.packed_bytes = QPackedLayout(p.k_packed, p.n).bytes();
  ctx.SetOutput(0, DType::kUInt8, {p.packed_bytes});
}

// QLinearFused(x uint8/int8, packed uint8, residual float32?).
void InferQLinearFused(OpContext& ctx) {
  ctx.ExpectInputs(2, 3);
  ctx.ExpectDType(0, {DType::kUInt8, DType::kInt8});
  ctx.ExpectDType(1, {DType::kUInt8});
  QFusedParams& p = ctx.SetParams<QFusedParams>();
  p.conv = ctx.node.GetInt("conv", 0) != 0;
  p.k = ctx.node.GetInt("k", 0);
  p.n = ctx.node.GetInt("n", 0);
  p.y_dtype = FusedOutputDType(ctx);
  p.act = FusedActivation::FromNode(ctx.node);
  if (p.k <= 0 || p.n <= 0) ctx.Error("attributes k and n must be positive");
  p.row_bytes = ctx.node.GetInt("row_bytes", 0);
  p.k_packed = p.k;
  const Shape& x = ctx.in(0).shape;
  Shape out;
  p.channels_last = ctx.node.GetInt("channels_last", 0) != 0;
  if (p.channels_last && !p.conv) ctx.Error("channels_last needs conv=1");
  if (p.conv) {
    if (x.size() < 3 || x.size() > 5) ctx.Error("X must have rank 3 to 5, got ", ShapeToString(x));
    if (p.channels_last && x.size() != 4)
      ctx.Error("a channels-last X must be [N, H, W, C], got ", ShapeToString(x));
    if (!ctx.node.Has("kernel_shape")) ctx.Error("missing attribute 'kernel_shape'");
    p.group = ctx.node.GetInt("group", 1);
    if (p.group != 1) ctx.Error("group must be 1, got ", p.group);
    const std::vector<int64_t> kernel = ctx.node.GetInts("kernel_shape");
    if (kernel.size() + 2 != x.size()) ctx.Error("kernel_shape must have ", x.size() - 2, " dims");
    const Shape spatial = p.channels_last ? Shape(x.begin() + 1, x.end() - 1) : Shape(x.begin() + 2, x.end());
    const int64_t channels = p.channels_last ? x.back() : x[1];
    p.geo = MakeGeometry(ctx, spatial, kernel, /*allow_ceil=*/false);
    if (channels * p.geo.kernel_size() != p.k)
      ctx.Error("X ", ShapeToString(x), " with kernel ", p.geo.kernel_size(), " does not give k=", p.k);
    if (p.row_bytes != 0) {
      const int64_t run = p.k / kernel[0];
      if (!p.channels_last || p.row_bytes < run || p.row_bytes % 4 != 0)
        ctx.Error("row_bytes=", p.row_bytes, " needs channels_last and a multiple of 4 of at least KW * C = ", run);
      p.k_packed = kernel[0] * p.row_bytes;
    }
    if (p.channels_last) {
      out = {x[0]};
      for (int64_t d : p.geo.OutShape()) out.push_back(d);
      out.push_back(p.n);
    } else {
      out = {x[0], p.n};
      for (int64_t d : p.geo.OutShape()) out.push_back(d);
    }
  } else {
    if (p.row_bytes != 0) ctx.Error("row_bytes needs conv=1");
    if (x.empty() || x.back() != p.k) ctx.Error("X ", ShapeToString(x), " must end in k=", p.k);
    p.rows = NumElements(Shape(x.begin(), x.end() - 1));
    out = x;
    out.back() = p.n;
  }
  if (ctx.in(1).size() != QPackedLayout(p.k_packed, p.n).bytes())
    ctx.Error("the packed operand has ", ctx.in(1).size(), " bytes, expected ",
              QPackedLayout(p.k_packed, p.n).bytes(), " for k=", p.k_packed, ", n=", p.n);
  p.has_residual = ctx.HasInput(2);
  if (p.has_residual) {
    ctx.ExpectDType(2, {DType::kFloat32});
    if (ctx.in(2).shape != out)
      ctx.Error("the residual ", ShapeToString(ctx.in(2).shape), " must have the output shape ",
                ShapeToString(out));
  }
  ctx.SetOutput(0, p.y_dtype, out);
}

// QLookup(x uint8/int8, table [256] uint8/int8): y = table[raw byte of x].
void InferQLookup(OpContext& ctx) {
  ctx.ExpectInputs(2, 2);
  ctx.ExpectDType(0, {DType::kUInt8, DType::kInt8});
  ctx.ExpectDType(1, {DType::kUInt8, DType::kInt8});
  if (ctx.in(1).size() != 256) ctx.Error("the table must have 256 entries, got ", ctx.in(1).size());
  ctx.SetOutput(0, ctx.in(1).dtype, ctx.in(0).shape);
}

// QLinearAdd(a, a_scale, a_zp?, b, b_scale, b_zp?, y_scale, y_zp?) (domain kaiwu,
// onnxruntime's com.microsoft input order; passes/fuse_qdq_add.cc): y =
// Q(DQ(a) + DQ(b)), numpy broadcasting, every scale and zero point one element;
// y of y_zp's dtype (uint8 without one).
void InferQLinearAdd(OpContext& ctx) {
  ctx.ExpectInputs(7, 8);
  for (int i : {0, 3}) {
    ctx.ExpectDType(i, {DType::kUInt8, DType::kInt8});
    ctx.ExpectDType(i + 1, {DType::kFloat32});
    ExpectScalar(ctx, i + 1, i == 0 ? "a_scale" : "b_scale");
    if (ctx.HasInput(i + 2)) {
      ctx.ExpectDType(i + 2, {ctx.in(i).dtype});
      ExpectScalar(ctx, i + 2, i == 0 ? "a_zero_point" : "b_zero_point");
    }
  }
  ctx.ExpectDType(6, {DType::kFloat32});
  ExpectScalar(ctx, 6, "y_scale");
  DType y = DType::kUInt8;
  if (ctx.HasInput(7)) {
    ctx.ExpectDType(7, {DType::kUInt8, DType::kInt8});
    ExpectScalar(ctx, 7, "y_zero_point");
    y = ctx.in(7).dtype;
  }
  ctx.SetOutput(0, y, BroadcastShapes(ctx, ctx.in(0).shape, ctx.in(3).shape));
}

}  // namespace

void RegisterQuantFusedOps(OpRegistry& r) {
  r.Define(OpId::kQLinearAdd, &InferQLinearAdd);
  r.Define(OpId::kQLookup, &InferQLookup);
  r.Define(OpId::kQPackWeights, &InferQPackWeights);
  r.Define(OpId::kQLinearFused, &InferQLinearFused);
}

}  // namespace kaiwu
