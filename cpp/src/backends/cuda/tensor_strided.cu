// Transpose, Slice, Expand and Tile: each is one StridedCopy of the view that
// copy_geometry.h makes of the op's inferred params and shapes (permuted
// strides, strides scaled by the step with a start offset, zero strides on
// broadcast or repeat dims), the same view the CPU kernels copy.
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
  void Init(const PrepareContext& ctx, const CopyView& view) {
    copy_.Init(ctx, view.shape, view.strides, view.offset, DTypeSize(ctx.inputs[0].dtype));
  }

  StridedCopy copy_;
};

class TransposeKernel : public StridedKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    Init(ctx, TransposeCopyView(ctx.inputs[0].shape, ctx.Params<TransposeParams>()));
  }
};

class SliceKernel : public StridedKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    Init(ctx, SliceCopyView(ctx.inputs[0].shape, ctx.Params<SliceParams>(), ctx.outputs[0].shape));
  }
};

class ExpandKernel : public StridedKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    Init(ctx, ExpandCopyView(ctx.inputs[0].shape, ctx.outputs[0].shape));
  }
};

class TileKernel : public StridedKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    Init(ctx, TileCopyView(ctx.inputs[0].shape, ctx.Params<TileParams>()));
  }
};

}  // namespace

void RegisterTensorStridedKernels(KernelRegistry& r) {
  r.Register(OpId::kTranspose, {KAIWU_ALL_DTYPES}, &MakeKernel<TransposeKernel>);
  r.Register(OpId::kSlice, {KAIWU_ALL_DTYPES}, &MakeKernel<SliceKernel>);
  r.Register(OpId::kExpand, {KAIWU_ALL_DTYPES}, &MakeKernel<ExpandKernel>);
  r.Register(OpId::kTile, {KAIWU_ALL_DTYPES}, &MakeKernel<TileKernel>);
}

}  // namespace tensor
}  // namespace cuda
}  // namespace kaiwu
