// Ops whose outputs come from shapes or plan-time constants: Shape, Size,
// ConstantOfShape, Range. Shape inference computes their values too, and the
// planner writes them at plan time with Eval*: no backend has a kernel for them.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype_dispatch.h"
#include "ops/op_registry.h"

namespace kaiwu {
namespace {

/// The value every element of the single output gets (ConstantOfShape), or
/// the plan-time contents of the output (Shape, Size).
struct ConstParams : OpParams {
  DType dtype = DType::kFloat32;
  unsigned char value[8] = {};
  std::vector<int64_t> ints;  // Shape and Size: the output's elements
  double start_f = 0, delta_f = 1;
  int64_t start_i = 0, delta_i = 1;
};

// Shape (start/end from opset 15): computed from the input's shape alone.
void InferShape(OpContext& ctx) {
  const Shape& in = ctx.in(0).shape;
  int64_t rank = static_cast<int64_t>(in.size());
  auto clamp = [rank](int64_t v) {
    if (v < 0) v += rank;
    return std::min(std::max<int64_t>(v, 0), rank);
  };
  int64_t start = clamp(ctx.node.GetInt("start", 0));
  int64_t end = clamp(ctx.node.GetInt("end", rank));
  ConstParams& p = ctx.SetParams<ConstParams>();
  p.ints.assign(in.begin() + start, in.begin() + std::max(start, end));
  ctx.shape_only = true;
  ctx.SetOutput(0, DType::kInt64, {static_cast<int64_t>(p.ints.size())});
}

void InferSize(OpContext& ctx) {
  ctx.SetParams<ConstParams>().ints = {ctx.in(0).size()};
  ctx.shape_only = true;
  ctx.SetOutput(0, DType::kInt64, {});
}

void EvalInts(const OpParams& params, const std::vector<TensorInfo>&, void* const* data) {
  const std::vector<int64_t>& v = static_cast<const ConstParams&>(params).ints;
  if (!v.empty()) std::memcpy(data[0], v.data(), v.size() * sizeof(int64_t));
}

// ConstantOfShape: input 0 is the shape; attribute `value` a one-element tensor.
void InferConstantOfShape(OpContext& ctx) {
  Shape shape = ctx.ConstInts(0);
  if (ctx.in(0).rank() > 1) ctx.Error("the shape input must be 1-D");
  ConstParams& p = ctx.SetParams<ConstParams>();
  if (ctx.node.Has("value")) {
    const std::shared_ptr<Tensor>& t = ctx.node.attrs.at("value").t;
    if (!t || t->size() != 1) ctx.Error("attribute 'value' must be a one-element tensor");
    p.dtype = t->dtype();
    if (DTypeSize(p.dtype) == 0 || DTypeSize(p.dtype) > sizeof(p.value))
      ctx.Error("unsupported value dtype ", DTypeName(p.dtype));
    std::memcpy(p.value, t->data(), DTypeSize(p.dtype));
  }
  ctx.SetOutput(0, p.dtype, std::move(shape));
}

void EvalConstantOfShape(const OpParams& params, const std::vector<TensorInfo>& outputs,
                         void* const* data) {
  const ConstParams& p = static_cast<const ConstParams&>(params);
  const size_t elem = DTypeSize(p.dtype);
  char* out = static_cast<char*>(data[0]);
  const int64_t n = outputs[0].size();
  for (int64_t i = 0; i < n; ++i) std::memcpy(out + i * elem, p.value, elem);
}

// Range: start, limit and delta are scalars known when the plan is built.
void InferRange(OpContext& ctx) {
  const DType dtype = ctx.in(0).dtype;
  ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kInt16, DType::kInt32,
                      DType::kInt64});
  for (int i = 0; i < 3; ++i) {
    const TensorInfo& t = ctx.in(i);
    if (t.dtype != dtype) ctx.Error("inputs must share one dtype");
    if (t.size() != 1) ctx.Error("input ", i, " must be a scalar, got ", ShapeToString(t.shape));
    if (!t.data) ctx.Error("input ", i, " must be known when the plan is built");
  }
  ConstParams& p = ctx.SetParams<ConstParams>();
  p.dtype = dtype;
  int64_t n = 0;
  KAIWU_DISPATCH_ALL(dtype, {
    T start = *ctx.inputs[0].As<T>(), limit = *ctx.inputs[1].As<T>();
    T delta = *ctx.inputs[2].As<T>();
    if (delta == T(0)) ctx.Error("delta must not be zero");
    T diff = static_cast<T>(limit - start);
    double steps = std::ceil(static_cast<double>(diff) / static_cast<double>(delta));
    if (!std::isfinite(steps) || steps > 1e12) ctx.Error("range is too long or not finite");
    n = std::max<int64_t>(0, static_cast<int64_t>(steps));
    p.start_f = static_cast<double>(start);
    p.delta_f = static_cast<double>(delta);
    p.start_i = static_cast<int64_t>(start);
    p.delta_i = static_cast<int64_t>(delta);
  });
  ctx.SetOutput(0, dtype, {n});
}

template <typename T>
void FillRange(void* out, int64_t count, T start, T delta) {
  T* o = static_cast<T*>(out);
  for (int64_t i = 0; i < count; ++i) o[i] = static_cast<T>(start + static_cast<T>(i) * delta);
}

void EvalRange(const OpParams& params, const std::vector<TensorInfo>& outputs,
               void* const* data) {
  const ConstParams& p = static_cast<const ConstParams&>(params);
  const int64_t n = outputs[0].size();
  void* o = data[0];
  switch (p.dtype) {
    case DType::kFloat32: FillRange<float>(o, n, float(p.start_f), float(p.delta_f)); break;
    case DType::kFloat64: FillRange<double>(o, n, p.start_f, p.delta_f); break;
    case DType::kInt16: FillRange<int16_t>(o, n, int16_t(p.start_i), int16_t(p.delta_i)); break;
    case DType::kInt32: FillRange<int32_t>(o, n, int32_t(p.start_i), int32_t(p.delta_i)); break;
    default: FillRange<int64_t>(o, n, p.start_i, p.delta_i); break;
  }
}

}  // namespace

void RegisterShapeOps(OpRegistry& r) {
  r.Define(OpId::kShape, &InferShape, 0, &EvalInts);
  r.Define(OpId::kSize, &InferSize, 0, &EvalInts);
  r.Define(OpId::kConstantOfShape, &InferConstantOfShape, -1, &EvalConstantOfShape);
  r.Define(OpId::kRange, &InferRange, 0, &EvalRange);
}

}  // namespace kaiwu
