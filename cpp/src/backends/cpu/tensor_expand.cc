// Expand (numpy broadcast to a shape) and Tile (repeat along each axis): both
// are strided copies whose broadcast dims read with stride 0 (ExpandCopyView,
// TileCopyView: copy_geometry.h).
#include "backends/copy_geometry.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/tensor_util.h"

namespace kaiwu {
namespace cpu {
namespace {

class ExpandKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.inputs[0];
    const CopyView view = ExpandCopyView(x.shape, ctx.outputs[0].shape);
    copy_.Init(ctx, view.shape, view.strides, view.offset, DTypeSize(x.dtype));
  }
  void Run(const KernelIO& io) const override { copy_.Run(io.inputs[0], io.outputs[0], io.pool); }

 private:
  StridedCopy copy_;
};

class TileKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.inputs[0];
    const CopyView view = TileCopyView(x.shape, ctx.Params<TileParams>());
    copy_.Init(ctx, view.shape, view.strides, view.offset, DTypeSize(x.dtype));
  }
  void Run(const KernelIO& io) const override { copy_.Run(io.inputs[0], io.outputs[0], io.pool); }

 private:
  StridedCopy copy_;
};

}  // namespace

void RegisterTensorExpandKernels(KernelRegistry& r) {
  r.Register(OpId::kExpand, {KAIWU_ALL_DTYPES}, &MakeKernel<ExpandKernel>);
  r.Register(OpId::kTile, {KAIWU_ALL_DTYPES}, &MakeKernel<TileKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
