// Host-side geometry of the strided copies (see copy_geometry.h).
#include "backends/copy_geometry.h"

#include <algorithm>

#include "backends/cpu/cpu_kernels.h"

namespace kaiwu {

void MergeCopyDims(const Shape& out_shape, const std::vector<int64_t>& in_strides,
                   std::vector<int64_t>* shape, std::vector<int64_t>* strides) {
  shape->clear();
  strides->clear();
  for (size_t d = 0; d < out_shape.size(); ++d) {
    if (out_shape[d] == 1) continue;  // size-1 dims never move the source
    if (!shape->empty() && strides->back() == in_strides[d] * out_shape[d]) {
      shape->back() *= out_shape[d];  // contiguous with the previous dim: merge
      strides->back() = in_strides[d];
    } else {
      shape->push_back(out_shape[d]);
      strides->push_back(in_strides[d]);
    }
  }
  if (shape->empty()) {
    shape->push_back(1);
    strides->push_back(1);
  }
}

SliceView ComputeSliceView(const PrepareContext& ctx) {
  const TensorInfo& x = ctx.in(0);
  const int64_t rank = x.rank();
  std::vector<int64_t> starts, ends, axes, steps;
  if (ctx.node.opset >= 10) {
    starts = ctx.ConstInts(1);
    ends = ctx.ConstInts(2);
    if (ctx.HasInput(3)) axes = ctx.ConstInts(3);
    if (ctx.HasInput(4)) steps = ctx.ConstInts(4);
  } else {
    starts = ctx.node.GetInts("starts");
    ends = ctx.node.GetInts("ends");
    axes = ctx.node.GetInts("axes");
  }
  const size_t n = starts.size();
  if (ends.size() != n) ctx.Error("starts and ends have different lengths");
  if (axes.empty()) {
    if (static_cast<int64_t>(n) > rank) ctx.Error("more starts than input dims");
    for (size_t i = 0; i < n; ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(n, 1);
  if (axes.size() != n || steps.size() != n)
    ctx.Error("starts, ends, axes and steps must have the same length");

  const std::vector<int64_t> in_strides = Strides(x.shape);
  SliceView view;
  view.shape = x.shape;
  view.strides = in_strides;
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < n; ++i) {
    const int64_t axis = NormalizeAxis(ctx, axes[i], rank);
    if (seen[axis]) ctx.Error("axis ", axes[i], " is repeated");
    seen[axis] = true;
    const int64_t dim = x.shape[axis], step = steps[i];
    if (step == 0) ctx.Error("steps must not be zero");
    int64_t start = starts[i], end = ends[i];
    if (start < 0) start += dim;
    if (end < 0) end += dim;
    int64_t count;
    if (dim == 0) {
      start = 0;
      count = 0;
    } else if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
      count = end > start ? (end - start - 1) / step + 1 : 0;
    } else {
      start = std::clamp<int64_t>(start, 0, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
      count = start > end ? (start - end - 1) / -step + 1 : 0;
    }
    view.shape[axis] = count;
    if (count > 0) view.offset += start * in_strides[axis];
    view.strides[axis] = in_strides[axis] * step;
  }
  if (NumElements(view.shape) == 0) view.offset = 0;
  return view;
}

}  // namespace kaiwu
