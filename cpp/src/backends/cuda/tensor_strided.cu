// Transpose, Slice, Expand and Tile: each is one StridedCopy whose input
// strides PrepareDevice derives as the CPU kernel of the op does (permuted,
// scaled by the step with a start offset, zero on broadcast or repeat dims).
#include <algorithm>
#include <vector>

#include "backends/cuda/tensor_util.cuh"

namespace kaiwu {
namespace cuda {
namespace tensor {
namespace {

class StridedKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    copy_.Run(io.inputs[0], io.outputs[0], Dev(io).stream);
  }

 protected:
  StridedCopy copy_;
};

class TransposeKernel : public StridedKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.in(0);
    const int64_t rank = x.rank();
    std::vector<int64_t> perm = ctx.node.GetInts("perm");
    if (!ctx.node.Has("perm"))
      for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
    const std::vector<int64_t> in_strides = Strides(x.shape);
    std::vector<int64_t> strides(rank);
    for (int64_t d = 0; d < rank; ++d) strides[d] = in_strides[perm[d]];
    copy_.Init(ctx, ctx.outputs[0].shape, strides, 0, DTypeSize(x.dtype));
  }
};

class SliceKernel : public StridedKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
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
    if (axes.empty())
      for (size_t i = 0; i < n; ++i) axes.push_back(static_cast<int64_t>(i));
    if (steps.empty()) steps.assign(n, 1);
    // The CPU Prepare validated everything; this repeats its clamping for the offset.
    const std::vector<int64_t> in_strides = Strides(x.shape);
    const Shape& out = ctx.outputs[0].shape;
    std::vector<int64_t> strides = in_strides;
    int64_t offset = 0;
    for (size_t i = 0; i < n; ++i) {
      const int64_t axis = axes[i] < 0 ? axes[i] + rank : axes[i];
      const int64_t dim = x.shape[axis], step = steps[i];
      int64_t start = starts[i] < 0 ? starts[i] + dim : starts[i];
      if (dim == 0)
        start = 0;
      else
        start = std::clamp<int64_t>(start, 0, step > 0 ? dim : dim - 1);
      if (out[axis] > 0) offset += start * in_strides[axis];
      strides[axis] = in_strides[axis] * step;
    }
    if (NumElements(out) == 0) offset = 0;
    copy_.Init(ctx, out, strides, offset, DTypeSize(x.dtype));
  }
};

class ExpandKernel : public StridedKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.in(0);
    const Shape& out = ctx.outputs[0].shape;
    const size_t lead = out.size() - x.shape.size();
    const std::vector<int64_t> in_strides = Strides(x.shape);
    std::vector<int64_t> strides(out.size(), 0);
    for (size_t d = lead; d < out.size(); ++d)
      strides[d] = x.shape[d - lead] == 1 ? 0 : in_strides[d - lead];
    copy_.Init(ctx, out, strides, 0, DTypeSize(x.dtype));
  }
};

// Tile's output, viewed as (r0, d0, r1, d1, ...), reads input dim k with its
// stride and repeat dim k with stride 0.
class TileKernel : public StridedKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.in(0);
    const std::vector<int64_t> repeats = ctx.ConstInts(1);
    const std::vector<int64_t> in_strides = Strides(x.shape);
    Shape view;
    std::vector<int64_t> strides;
    for (int d = 0; d < x.rank(); ++d) {
      view.push_back(repeats[d]);
      strides.push_back(0);
      view.push_back(x.shape[d]);
      strides.push_back(in_strides[d]);
    }
    copy_.Init(ctx, view, strides, 0, DTypeSize(x.dtype));
  }
};

}  // namespace

void RegisterTensorStridedKernels(KernelRegistry& r) {
  r.Register("Transpose", &MakeKernel<TransposeKernel>);
  r.Register("Slice", &MakeKernel<SliceKernel>);
  r.Register("Expand", &MakeKernel<ExpandKernel>);
  r.Register("Tile", &MakeKernel<TileKernel>);
}

}  // namespace tensor
}  // namespace cuda
}  // namespace kaiwu
