#include "ops/op_context.h"

#include <algorithm>
#include <string>

#include "core/half.h"

namespace kaiwu {

const TensorInfo& OpContext::in(int i) const {
  if (!HasInput(i)) Error("input ", i, " is required but missing");
  return inputs[i];
}

void OpContext::SetOutput(int i, DType dtype, Shape shape) {
  if (static_cast<int>(outputs.size()) <= i) outputs.resize(i + 1);
  for (int64_t d : shape)
    if (d < 0) Error("computed a negative output dimension in ", ShapeToString(shape));
  outputs[i].present = true;
  outputs[i].dtype = dtype;
  outputs[i].shape = std::move(shape);
}

void OpContext::ExpectDType(int i, std::initializer_list<DType> allowed) const {
  DType t = in(i).dtype;
  for (DType a : allowed)
    if (a == t) return;
  std::string names;
  for (DType a : allowed) names += std::string(names.empty() ? "" : ", ") + DTypeName(a);
  Error("input ", i, " has dtype ", DTypeName(t), ", expected one of: ", names);
}

void OpContext::ExpectInputs(int min_count, int max_count) const {
  const int n = num_inputs();
  if (n >= min_count && n <= max_count) return;
  if (min_count == max_count)
    Error("expected ", min_count, min_count == 1 ? " input" : " inputs", ", got ", n);
  Error("expected ", min_count, " to ", max_count, " inputs, got ", n);
}

std::vector<int64_t> OpContext::ConstInts(int i) const {
  const TensorInfo& t = in(i);
  if (!t.data)
    Error("input ", i, " must be known when the plan is built (a constant or computed from "
          "shapes); data-dependent shapes are not supported");
  std::vector<int64_t> out(static_cast<size_t>(t.size()));
  for (size_t k = 0; k < out.size(); ++k) {
    switch (t.dtype) {
      case DType::kInt64: out[k] = t.As<int64_t>()[k]; break;
      case DType::kInt32: out[k] = t.As<int32_t>()[k]; break;
      default: Error("input ", i, " must be int64 or int32, got ", DTypeName(t.dtype));
    }
  }
  return out;
}

std::vector<double> ConstNumbers(const OpContext& ctx, int i) {
  const TensorInfo& t = ctx.in(i);
  if (!t.data)
    ctx.Error("input ", i, " must be known when the plan is built (a constant or computed from "
              "shapes); data-dependent shapes are not supported");
  std::vector<double> out(static_cast<size_t>(t.size()));
  for (size_t k = 0; k < out.size(); ++k) {
    switch (t.dtype) {
      case DType::kFloat32: out[k] = t.As<float>()[k]; break;
      case DType::kFloat64: out[k] = t.As<double>()[k]; break;
      case DType::kFloat16: out[k] = HalfToFloat(t.As<uint16_t>()[k]); break;
      case DType::kBFloat16: out[k] = BFloat16ToFloat(t.As<uint16_t>()[k]); break;
      case DType::kInt8: out[k] = t.As<int8_t>()[k]; break;
      case DType::kUInt8: out[k] = t.As<uint8_t>()[k]; break;
      case DType::kInt16: out[k] = t.As<int16_t>()[k]; break;
      case DType::kInt32: out[k] = t.As<int32_t>()[k]; break;
      case DType::kInt64: out[k] = static_cast<double>(t.As<int64_t>()[k]); break;
      default: ctx.Error("input ", i, " has unsupported dtype ", DTypeName(t.dtype));
    }
  }
  return out;
}

int64_t NormalizeAxis(const OpContext& ctx, int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    ctx.Error("axis ", axis, " is out of range for rank ", rank);
  return a;
}

Shape BroadcastShapes(const OpContext& ctx, const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      ctx.Error("shapes ", ShapeToString(a), " and ", ShapeToString(b), " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Shape BroadcastAll(const OpContext& ctx, const std::vector<Shape>& shapes) {
  Shape out = shapes.empty() ? Shape{} : shapes[0];
  for (size_t i = 1; i < shapes.size(); ++i) out = BroadcastShapes(ctx, out, shapes[i]);
  return out;
}

}  // namespace kaiwu
