// Shape inference of the index-reading ops: Gather, GatherElements, GatherND
// and OneHot. Index values are data, checked by the kernels when they run;
// here the dtypes, ranks and attributes.
#include <algorithm>
#include <vector>

#include "ops/tensor.h"

namespace kaiwu {
namespace {

// Gather: out[outer, j, inner] = data[outer, indices[j], inner].
void InferGather(OpContext& ctx) {
  const TensorInfo& x = ctx.in(0);
  ctx.ExpectDType(1, {DType::kInt64, DType::kInt32});
  const TensorInfo& ind = ctx.in(1);
  if (x.rank() == 0) ctx.Error("data must have rank >= 1");
  const int64_t axis = NormalizeAxis(ctx, ctx.node.GetInt("axis", 0), x.rank());
  Shape out(x.shape.begin(), x.shape.begin() + axis);
  out.insert(out.end(), ind.shape.begin(), ind.shape.end());
  out.insert(out.end(), x.shape.begin() + axis + 1, x.shape.end());
  ctx.SetParams<AxisParams>().axis = axis;
  ctx.SetOutput(0, x.dtype, std::move(out));
  // One index known when planned, every dim before the axis 1: the output is a
  // contiguous slice of the data, a view at that offset (q, k, v out of a
  // stacked projection). Out of range stays with the kernel, which reports it.
  if (ind.data && ind.size() == 1) {
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.shape[d];
    for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.shape[d];
    int64_t idx = ind.dtype == DType::kInt64 ? ind.As<int64_t>()[0] : ind.As<int32_t>()[0];
    if (idx < 0) idx += x.shape[axis];
    if (outer == 1 && idx >= 0 && idx < x.shape[axis]) {
      ctx.alias.assign(ctx.outputs.size(), -1);
      ctx.alias[0] = 0;
      ctx.alias_offset = {idx * inner};
    }
  }
}

// GatherElements: out[i..] = data[i.. with i_axis replaced by indices[i..]].
void InferGatherElements(OpContext& ctx) {
  const TensorInfo& x = ctx.in(0);
  ctx.ExpectDType(1, {DType::kInt64, DType::kInt32});
  const TensorInfo& ind = ctx.in(1);
  if (x.rank() == 0 || ind.rank() != x.rank())
    ctx.Error("data and indices must have the same rank >= 1, got ", ShapeToString(x.shape),
              " and ", ShapeToString(ind.shape));
  const int64_t axis = NormalizeAxis(ctx, ctx.node.GetInt("axis", 0), x.rank());
  for (int d = 0; d < x.rank(); ++d)
    if (d != axis && ind.shape[d] > x.shape[d])
      ctx.Error("indices ", ShapeToString(ind.shape), " exceed data ", ShapeToString(x.shape),
                " on axis ", d);
  ctx.SetParams<AxisParams>().axis = axis;
  ctx.SetOutput(0, x.dtype, ind.shape);
}

// GatherND(data, indices, batch_dims): out[b.., i..] = data[b.., indices[b.., i.., :], ...].
void InferGatherND(OpContext& ctx) {
  ctx.ExpectDType(1, {DType::kInt64, DType::kInt32});
  const TensorInfo& x = ctx.in(0);
  const TensorInfo& ind = ctx.in(1);
  const int r = x.rank(), q = ind.rank();
  const int64_t b = ctx.node.GetInt("batch_dims", 0);
  if (r < 1 || q < 1) ctx.Error("data and indices must have rank >= 1");
  if (b < 0 || b >= std::min(r, q)) ctx.Error("batch_dims ", b, " is out of range");
  const int64_t k = ind.shape[q - 1];
  if (k < 1 || k > r - b)
    ctx.Error("indices' last dim ", k, " must be in [1, ", r - b, "] (data rank ", r,
              ", batch_dims ", b, ")");
  for (int d = 0; d < b; ++d)
    if (x.shape[d] != ind.shape[d])
      ctx.Error("batch dims differ: data ", ShapeToString(x.shape), ", indices ",
                ShapeToString(ind.shape));
  Shape out(ind.shape.begin(), ind.shape.end() - 1);
  out.insert(out.end(), x.shape.begin() + b + k, x.shape.end());
  ctx.SetParams<GatherNDParams>().batch_dims = b;
  ctx.SetOutput(0, x.dtype, std::move(out));
}

// OneHot(indices, depth, values[off, on], axis): indices of any int or float
// dtype; the output has values' dtype and the depth dim inserted at `axis`.
void InferOneHot(OpContext& ctx) {
  ctx.ExpectDType(0, {DType::kInt64, DType::kInt32, DType::kFloat32, DType::kFloat64,
                      DType::kInt8, DType::kUInt8, DType::kInt16});
  std::vector<double> depth = ConstNumbers(ctx, 1);
  if (depth.size() != 1) ctx.Error("depth must have one element, got ", depth.size());
  const int64_t d = static_cast<int64_t>(depth[0]);
  if (d < 1) ctx.Error("depth must be positive, got ", depth[0]);
  const TensorInfo& values = ctx.in(2);
  if (values.size() != 2) ctx.Error("values must have 2 elements [off, on], got ", values.size());
  const TensorInfo& ind = ctx.in(0);
  const int64_t axis = NormalizeAxis(ctx, ctx.node.GetInt("axis", -1), ind.rank() + 1);
  Shape out(ind.shape.begin(), ind.shape.begin() + axis);
  out.push_back(d);
  out.insert(out.end(), ind.shape.begin() + axis, ind.shape.end());
  OneHotParams& p = ctx.SetParams<OneHotParams>();
  p.axis = axis;
  p.depth = d;
  ctx.SetOutput(0, values.dtype, std::move(out));
}

}  // namespace

void RegisterTensorGatherOps(OpRegistry& r) {
  r.Define(OpId::kGather, &InferGather);
  r.Define(OpId::kGatherElements, &InferGatherElements);
  r.Define(OpId::kGatherND, &InferGatherND);
  r.Define(OpId::kOneHot, &InferOneHot, /*type_input=*/2);  // keyed on the values' dtype
}

}  // namespace kaiwu
