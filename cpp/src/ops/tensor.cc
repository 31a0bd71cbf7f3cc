// Shape inference of layout and indexing: Concat Split Expand Tile Transpose
// Slice here; the views (tensor_view.cc), Gather* and OneHot (tensor_gather.cc)
// and Pad (tensor_pad.cc) register through RegisterTensorOps too.
#include <algorithm>
#include <utility>
#include <vector>

#include "ops/tensor.h"

namespace kaiwu {
namespace {

void InferConcat(OpContext& ctx) {
  if (ctx.num_inputs() == 0) ctx.Error("needs at least one input");
  const TensorInfo& first = ctx.in(0);
  if (first.rank() == 0) ctx.Error("cannot concatenate scalars");
  if (!ctx.node.Has("axis")) ctx.Error("attribute 'axis' is required");
  const int64_t axis = NormalizeAxis(ctx, ctx.node.GetInt("axis", 0), first.rank());
  Shape out = first.shape;
  out[axis] = 0;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const TensorInfo& t = ctx.in(i);
    if (t.dtype != first.dtype)
      ctx.Error("input ", i, " has dtype ", DTypeName(t.dtype), ", input 0 has ",
                DTypeName(first.dtype));
    bool match = t.rank() == first.rank();
    for (int d = 0; match && d < t.rank(); ++d) match = d == axis || t.shape[d] == first.shape[d];
    if (!match)
      ctx.Error("input ", i, " has shape ", ShapeToString(t.shape), ", which does not match ",
                ShapeToString(first.shape), " outside axis ", axis);
    out[axis] += t.shape[axis];
  }
  ctx.SetParams<AxisParams>().axis = axis;
  ctx.SetOutput(0, first.dtype, std::move(out));
}

// Split: sizes from input 1 (opset 13+) or the `split` attribute (older), else
// num_outputs (opset 18+, last chunk smaller) or an equal split.
void InferSplit(OpContext& ctx) {
  const TensorInfo& x = ctx.in(0);
  if (x.rank() == 0) ctx.Error("cannot split a scalar");
  const int64_t axis = NormalizeAxis(ctx, ctx.node.GetInt("axis", 0), x.rank());
  const int64_t n = static_cast<int64_t>(ctx.node.outputs.size());
  const int64_t dim = x.shape[axis];
  std::vector<int64_t> sizes;
  if (ctx.node.opset >= 13 && ctx.HasInput(1)) {
    sizes = ctx.ConstInts(1);
  } else if (ctx.node.opset < 13 && ctx.node.Has("split")) {
    sizes = ctx.node.GetInts("split");
  } else if (ctx.node.Has("num_outputs")) {
    int64_t k = ctx.node.GetInt("num_outputs", n);
    if (k != n) ctx.Error("num_outputs is ", k, " but the node has ", n, " outputs");
    int64_t chunk = (dim + n - 1) / n;
    if (chunk * (n - 1) > dim)
      ctx.Error("cannot split a dim of ", dim, " into ", n, " chunks of ", chunk);
    sizes.assign(n, chunk);
    sizes.back() = dim - chunk * (n - 1);
  } else {
    if (dim % n != 0) ctx.Error("cannot split a dim of ", dim, " into ", n, " equal parts");
    sizes.assign(n, dim / n);
  }
  if (static_cast<int64_t>(sizes.size()) != n)
    ctx.Error("split has ", sizes.size(), " entries but the node has ", n, " outputs");
  int64_t sum = 0;
  for (int64_t s : sizes) {
    if (s < 0) ctx.Error("split sizes must be non-negative");
    sum += s;
  }
  if (sum != dim) ctx.Error("split sizes sum to ", sum, " but axis ", axis, " has size ", dim);
  ctx.SetParams<AxisParams>().axis = axis;
  for (int64_t i = 0; i < n; ++i) {
    Shape out = x.shape;
    out[axis] = sizes[i];
    ctx.SetOutput(static_cast<int>(i), x.dtype, std::move(out));
  }
}

// Expand: numpy broadcast of the input to the shape operand.
void InferExpand(OpContext& ctx) {
  const TensorInfo& x = ctx.in(0);
  std::vector<int64_t> target = ctx.ConstInts(1);
  ctx.SetOutput(0, x.dtype, BroadcastShapes(ctx, x.shape, target));
}

void InferTile(OpContext& ctx) {
  const TensorInfo& x = ctx.in(0);
  std::vector<int64_t> repeats = ctx.ConstInts(1);
  if (static_cast<int>(repeats.size()) != x.rank())
    ctx.Error("repeats has ", repeats.size(), " entries for an input of rank ", x.rank());
  Shape out;
  for (int d = 0; d < x.rank(); ++d) {
    if (repeats[d] < 0) ctx.Error("repeats must be non-negative, got ", repeats[d]);
    out.push_back(repeats[d] * x.shape[d]);
  }
  ctx.SetParams<TileParams>().repeats = std::move(repeats);
  ctx.SetOutput(0, x.dtype, std::move(out));
}

void InferTranspose(OpContext& ctx) {
  const TensorInfo& x = ctx.in(0);
  const int64_t rank = x.rank();
  std::vector<int64_t> perm = ctx.node.GetInts("perm");
  if (!ctx.node.Has("perm")) {
    for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
  }
  if (static_cast<int64_t>(perm.size()) != rank)
    ctx.Error("perm has ", perm.size(), " entries for an input of rank ", rank);
  std::vector<bool> seen(rank, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p]) ctx.Error("perm is not a permutation of 0..", rank - 1);
    seen[p] = true;
  }
  Shape out(rank);
  for (int64_t d = 0; d < rank; ++d) out[d] = x.shape[perm[d]];
  ctx.SetParams<TransposeParams>().perm = std::move(perm);
  ctx.SetOutput(0, x.dtype, std::move(out));
}

// Slice: starts, ends, axes and steps from inputs (opset 10+) or attributes
// (before), checked and clamped as ONNX does (negative steps included).
void InferSlice(OpContext& ctx) {
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

  SliceParams& p = ctx.SetParams<SliceParams>();
  p.starts.assign(rank, 0);
  p.steps.assign(rank, 1);
  Shape out = x.shape;
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
    out[axis] = count;
    p.starts[axis] = start;
    p.steps[axis] = step;
  }
  ctx.SetOutput(0, x.dtype, std::move(out));
}

}  // namespace

void RegisterTensorOps(OpRegistry& r) {
  r.Define(OpId::kConcat, &InferConcat);
  r.Define(OpId::kSplit, &InferSplit);
  r.Define(OpId::kExpand, &InferExpand);
  r.Define(OpId::kTile, &InferTile);
  r.Define(OpId::kTranspose, &InferTranspose);
  r.Define(OpId::kSlice, &InferSlice);
  RegisterTensorViewOps(r);    // Reshape Flatten Squeeze Unsqueeze Identity Dropout
  RegisterTensorGatherOps(r);  // Gather GatherElements GatherND OneHot
  RegisterTensorPadOps(r);     // Pad
}

}  // namespace kaiwu
