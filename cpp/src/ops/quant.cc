// Shape inference of QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
// MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv.
#include "ops/quant.h"

#include <limits>
#include <vector>

#include "ops/op_registry.h"

namespace kaiwu {

void RegisterQuantFusedOps(OpRegistry& r);  // quant_fused.cc

void QuantRange(DType dtype, float* lo, float* hi) {
  switch (dtype) {
    case DType::kInt8: *lo = -128.f; *hi = 127.f; break;
    case DType::kUInt8: *lo = 0.f; *hi = 255.f; break;
    case DType::kInt16: *lo = -32768.f; *hi = 32767.f; break;
    default: *lo = -2147483648.f; *hi = 2147483520.f; break;  // largest float below 2^31
  }
}

namespace {

constexpr std::initializer_list<DType> kQuantTypes = {DType::kInt8, DType::kUInt8, DType::kInt16};

// The scale layout of a Q/DQ node from its input shape x, its scale (input 1)
// and zero point (input 2): per tensor, per axis or blocked.
void InferScaleLayout(OpContext& ctx, const Shape& x, QuantAxisParams* p) {
  ctx.ExpectDType(1, {DType::kFloat32});
  const Shape& s = ctx.in(1).shape;
  p->has_zero_point = ctx.HasInput(2);
  if (p->has_zero_point && ctx.in(2).size() != NumElements(s))
    ctx.Error("the zero point ", ShapeToString(ctx.in(2).shape), " must have the scale's shape ",
              ShapeToString(s));
  const int64_t block = ctx.node.GetInt("block_size", 0);
  if (block < 0) ctx.Error("block_size must be >= 0, got ", block);
  const int64_t rank = static_cast<int64_t>(x.size());
  if (block == 0 && NumElements(s) == 1 && s.size() <= 1) {
    p->mode = QuantAxisParams::Mode::kPerTensor;
    p->outer = NumElements(x);
    return;
  }
  if (rank == 0) ctx.Error("a scale of shape ", ShapeToString(s), " needs an input of rank >= 1");
  const int64_t axis = NormalizeAxis(ctx, ctx.node.GetInt("axis", 1), rank);
  p->axis_len = x[axis];
  p->outer = NumElements(Shape(x.begin(), x.begin() + axis));
  p->inner = NumElements(Shape(x.begin() + axis + 1, x.end()));
  if (block == 0) {
    if (s.size() != 1 || s[0] != x[axis])
      ctx.Error("a per-axis scale must be 1-D of size ", x[axis], " (axis ", axis, " of ",
                ShapeToString(x), "), got ", ShapeToString(s));
    p->mode = QuantAxisParams::Mode::kPerAxis;
    return;
  }
  Shape want = x;
  want[axis] = (x[axis] + block - 1) / block;
  if (s != want)
    ctx.Error("a blocked scale (block_size ", block, ", axis ", axis, ") must have shape ",
              ShapeToString(want), ", got ", ShapeToString(s));
  p->mode = QuantAxisParams::Mode::kBlocked;
  p->block = block;
}

// QuantizeLinear: y = saturate(round_half_even(x / scale) + zero_point).
void InferQuantizeLinear(OpContext& ctx) {
  ctx.ExpectInputs(2, 3);
  ctx.ExpectDType(0, {DType::kFloat32});
  QuantAxisParams& p = ctx.SetParams<QuantAxisParams>();
  InferScaleLayout(ctx, ctx.in(0).shape, &p);
  DType out = DType::kUInt8;
  const int64_t attr = ctx.node.GetInt("output_dtype", 0);
  if (attr == 2) out = DType::kUInt8;
  else if (attr == 3) out = DType::kInt8;
  else if (attr == 5) out = DType::kInt16;
  else if (attr != 0) ctx.Error("output_dtype ", attr, " is not supported (uint8, int8, int16 are)");
  if (p.has_zero_point) {
    ctx.ExpectDType(2, kQuantTypes);
    if (attr != 0 && ctx.in(2).dtype != out)
      ctx.Error("output_dtype ", DTypeName(out), " differs from the zero point's ",
                DTypeName(ctx.in(2).dtype));
    out = ctx.in(2).dtype;
  }
  p.quant_dtype = out;
  ctx.SetOutput(0, out, ctx.in(0).shape);
}

// DequantizeLinear: y = (x - zero_point) * scale, float32.
void InferDequantizeLinear(OpContext& ctx) {
  ctx.ExpectInputs(2, 3);
  ctx.ExpectDType(0, {DType::kInt8, DType::kUInt8, DType::kInt16, DType::kInt32});
  QuantAxisParams& p = ctx.SetParams<QuantAxisParams>();
  InferScaleLayout(ctx, ctx.in(0).shape, &p);
  if (p.has_zero_point) ctx.ExpectDType(2, {ctx.in(0).dtype});
  p.quant_dtype = ctx.in(0).dtype;
  ctx.SetOutput(0, DType::kFloat32, ctx.in(0).shape);
}

// DynamicQuantizeLinear: uint8 y with the scale and zero point of x's range
// (extended to hold 0).
void InferDynamicQuantizeLinear(OpContext& ctx) {
  ctx.ExpectInputs(1, 1);
  ctx.ExpectDType(0, {DType::kFloat32});
  ctx.SetOutput(0, DType::kUInt8, ctx.in(0).shape);
  ctx.SetOutput(1, DType::kFloat32, {});
  ctx.SetOutput(2, DType::kUInt8, {});
}

// A scalar-or-vector operand (zero point or scale) of size 1 or `len`; returns
// true for the vector form.
bool PerChannel(const OpContext& ctx, int i, int64_t len, const char* what) {
  if (!ctx.HasInput(i)) return false;
  const int64_t size = ctx.in(i).size();
  if (size == 1) return false;
  if (size != len)
    ctx.Error(what, " must have 1 or ", len, " elements, got ", ShapeToString(ctx.in(i).shape));
  return true;
}

// MatMul shapes of a (input ia) and b (input ib) into p.
void InferQMatMulShapes(OpContext& ctx, int ia, int ib, QMatMulParams* p) {
  Shape a = ctx.in(ia).shape, b = ctx.in(ib).shape;
  if (a.empty() || b.empty()) ctx.Error("operands must have rank >= 1");
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), 1);
  if (b_vec) b.push_back(1);
  p->m = a[a.size() - 2];
  p->k = a.back();
  p->n = b.back();
  if (b[b.size() - 2] != p->k)
    ctx.Error("inner dimensions differ: ", ShapeToString(ctx.in(ia).shape), " x ",
              ShapeToString(ctx.in(ib).shape));
  p->a_batch.assign(a.begin(), a.end() - 2);
  p->b_batch.assign(b.begin(), b.end() - 2);
  p->batch = BroadcastShapes(ctx, p->a_batch, p->b_batch);
  Shape out = p->batch;
  if (!a_vec) out.push_back(p->m);
  if (!b_vec) out.push_back(p->n);
  ctx.SetOutput(0, p->y_dtype, out);
}

// MatMulInteger(A, B, a_zero_point, b_zero_point) -> int32.
void InferMatMulInteger(OpContext& ctx) {
  ctx.ExpectInputs(2, 4);
  ctx.ExpectDType(0, {DType::kInt8, DType::kUInt8});
  ctx.ExpectDType(1, {DType::kInt8, DType::kUInt8});
  QMatMulParams& p = ctx.SetParams<QMatMulParams>();
  p.a_dtype = ctx.in(0).dtype;
  p.b_dtype = ctx.in(1).dtype;
  p.y_dtype = DType::kInt32;
  InferQMatMulShapes(ctx, 0, 1, &p);
  p.has_a_zp = ctx.HasInput(2);
  p.has_b_zp = ctx.HasInput(3);
  if (p.has_a_zp) ctx.ExpectDType(2, {p.a_dtype});
  if (p.has_b_zp) ctx.ExpectDType(3, {p.b_dtype});
  p.a_per_row = PerChannel(ctx, 2, p.m, "a_zero_point");
  p.b_per_col = PerChannel(ctx, 3, p.n, "b_zero_point");
}

// QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp).
void InferQLinearMatMul(OpContext& ctx) {
  ctx.ExpectInputs(8, 8);
  ctx.ExpectDType(0, {DType::kInt8, DType::kUInt8});
  ctx.ExpectDType(3, {DType::kInt8, DType::kUInt8});
  for (int i : {1, 4, 6}) ctx.ExpectDType(i, {DType::kFloat32});
  QMatMulParams& p = ctx.SetParams<QMatMulParams>();
  p.a_dtype = ctx.in(0).dtype;
  p.b_dtype = ctx.in(3).dtype;
  ctx.ExpectDType(2, {p.a_dtype});
  ctx.ExpectDType(5, {p.b_dtype});
  ctx.ExpectDType(7, {DType::kInt8, DType::kUInt8});
  p.y_dtype = ctx.in(7).dtype;
  p.has_a_zp = p.has_b_zp = true;
  InferQMatMulShapes(ctx, 0, 3, &p);
  const bool a_s = PerChannel(ctx, 1, p.m, "a_scale"), a_z = PerChannel(ctx, 2, p.m, "a_zero_point");
  const bool b_s = PerChannel(ctx, 4, p.n, "b_scale"), b_z = PerChannel(ctx, 5, p.n, "b_zero_point");
  const bool y_s = PerChannel(ctx, 6, p.n, "y_scale"), y_z = PerChannel(ctx, 7, p.n, "y_zero_point");
  if (a_s != a_z || b_s != b_z || y_s != y_z)
    ctx.Error("a scale and its zero point must both be scalars or both per channel");
  p.a_per_row = a_s;
  p.b_per_col = b_s;
  p.y_per_col = y_s;
}

// The shared part of ConvInteger and QLinearConv: x (input ix) and w (iw).
void InferQConvShapes(OpContext& ctx, int ix, int iw, QConvParams* p) {
  const Shape& x = ctx.in(ix).shape;
  const Shape& w = ctx.in(iw).shape;
  if (x.size() < 3 || x.size() > 5) ctx.Error("X must have rank 3 to 5, got ", ShapeToString(x));
  if (w.size() != x.size())
    ctx.Error("W ", ShapeToString(w), " must have the rank of X ", ShapeToString(x));
  p->n = x[0];
  p->c = x[1];
  p->m = w[0];
  p->group = ctx.node.GetInt("group", 1);
  if (p->group < 1 || p->c % p->group != 0 || p->m % p->group != 0 || w[1] * p->group != p->c)
    ctx.Error("group ", p->group, " does not fit X ", ShapeToString(x), " and W ", ShapeToString(w));
  std::vector<int64_t> kernel(w.begin() + 2, w.end());
  if (ctx.node.Has("kernel_shape") && ctx.node.GetInts("kernel_shape") != kernel)
    ctx.Error("kernel_shape does not match W ", ShapeToString(w));
  p->geo = MakeGeometry(ctx, Shape(x.begin() + 2, x.end()), kernel, /*allow_ceil=*/false);
  Shape out = {p->n, p->m};
  for (int64_t d : p->geo.OutShape()) out.push_back(d);
  ctx.SetOutput(0, p->y_dtype, out);
}

// ConvInteger(x, w, x_zero_point, w_zero_point) -> int32.
void InferConvInteger(OpContext& ctx) {
  ctx.ExpectInputs(2, 4);
  ctx.ExpectDType(0, {DType::kInt8, DType::kUInt8});
  ctx.ExpectDType(1, {DType::kInt8, DType::kUInt8});
  QConvParams& p = ctx.SetParams<QConvParams>();
  p.x_dtype = ctx.in(0).dtype;
  p.w_dtype = ctx.in(1).dtype;
  p.y_dtype = DType::kInt32;
  InferQConvShapes(ctx, 0, 1, &p);
  p.has_x_zp = ctx.HasInput(2);
  p.has_w_zp = ctx.HasInput(3);
  if (p.has_x_zp) {
    ctx.ExpectDType(2, {p.x_dtype});
    if (ctx.in(2).size() != 1) ctx.Error("x_zero_point must be a scalar");
  }
  if (p.has_w_zp) ctx.ExpectDType(3, {p.w_dtype});
  p.w_per_channel = PerChannel(ctx, 3, p.m, "w_zero_point");
}

// QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B).
void InferQLinearConv(OpContext& ctx) {
  ctx.ExpectInputs(8, 9);
  ctx.ExpectDType(0, {DType::kInt8, DType::kUInt8});
  ctx.ExpectDType(3, {DType::kInt8, DType::kUInt8});
  for (int i : {1, 4, 6}) ctx.ExpectDType(i, {DType::kFloat32});
  QConvParams& p = ctx.SetParams<QConvParams>();
  p.x_dtype = ctx.in(0).dtype;
  p.w_dtype = ctx.in(3).dtype;
  ctx.ExpectDType(2, {p.x_dtype});
  ctx.ExpectDType(5, {p.w_dtype});
  ctx.ExpectDType(7, {DType::kInt8, DType::kUInt8});
  p.y_dtype = ctx.in(7).dtype;
  p.has_x_zp = p.has_w_zp = true;
  InferQConvShapes(ctx, 0, 3, &p);
  for (int i : {1, 2, 6, 7})
    if (ctx.in(i).size() != 1) ctx.Error("input ", i, " (a scale or zero point of x or y) must be a scalar");
  const bool w_s = PerChannel(ctx, 4, p.m, "w_scale"), w_z = PerChannel(ctx, 5, p.m, "w_zero_point");
  p.w_per_channel = w_s || w_z;
  p.has_bias = ctx.HasInput(8);
  if (p.has_bias) {
    ctx.ExpectDType(8, {DType::kInt32});
    if (ctx.in(8).shape != Shape{p.m}) ctx.Error("B must have shape [", p.m, "]");
  }
}

}  // namespace

void RegisterQuantOps(OpRegistry& r) {
  r.Define(OpId::kQuantizeLinear, &InferQuantizeLinear);
  r.Define(OpId::kDequantizeLinear, &InferDequantizeLinear);
  r.Define(OpId::kDynamicQuantizeLinear, &InferDynamicQuantizeLinear);
  r.Define(OpId::kMatMulInteger, &InferMatMulInteger);
  r.Define(OpId::kQLinearMatMul, &InferQLinearMatMul);
  r.Define(OpId::kConvInteger, &InferConvInteger);
  r.Define(OpId::kQLinearConv, &InferQLinearConv);
  RegisterQuantFusedOps(r);
}

}  // namespace kaiwu
