// Transpose, Slice, Expand and Tile: each is one StridedCopy whose input
// strides PrepareDevice derives as the CPU kernel of the op does (permuted,
// scaled by the step with a start offset, zero on broadcast or repeat dims).
#include <vector>

#include "backends/copy_geometry.h"
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
    // The CPU Prepare validated the node; this recomputes its clamped view.
    const SliceView view = ComputeSliceView(ctx);
    copy_.Init(ctx, view.shape, view.strides, view.offset, DTypeSize(ctx.in(0).dtype));
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
  r.Register(OpId::kTranspose, kAnyDType, &MakeKernel<TransposeKernel>);
  r.Register(OpId::kSlice, kAnyDType, &MakeKernel<SliceKernel>);
  r.Register(OpId::kExpand, kAnyDType, &MakeKernel<ExpandKernel>);
  r.Register(OpId::kTile, kAnyDType, &MakeKernel<TileKernel>);
}

}  // namespace tensor
}  // namespace cuda
}  // namespace kaiwu
