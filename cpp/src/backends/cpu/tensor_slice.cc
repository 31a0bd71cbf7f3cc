// Slice: the op layer clamped starts and steps (ops/tensor.cc); runs as a
// strided copy of the view SliceCopyView (copy_geometry.h) makes of them.
#include "backends/copy_geometry.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/tensor_util.h"

namespace kaiwu {
namespace cpu {
namespace {

class SliceKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.inputs[0];
    const CopyView view =
        SliceCopyView(x.shape, ctx.Params<SliceParams>(), ctx.outputs[0].shape);
    copy_.Init(ctx, view.shape, view.strides, view.offset, DTypeSize(x.dtype));
  }

  void Run(const KernelIO& io) const override { copy_.Run(io.inputs[0], io.outputs[0], io.pool); }

 private:
  StridedCopy copy_;
};

}  // namespace

void RegisterTensorSliceKernels(KernelRegistry& r) {
  r.Register(OpId::kSlice, {KAIWU_ALL_DTYPES}, &MakeKernel<SliceKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
