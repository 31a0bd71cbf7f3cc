// Transpose: a strided copy with permuted input strides. StridedCopy merges
// dims that stay adjacent, so NCHW<->NHWC and 2-D transposes become batched
// 2-D transposes run in cache-sized tiles, parallel over batch and row tiles.
#include "backends/copy_geometry.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/tensor_util.h"

namespace kaiwu {
namespace cpu {
namespace {

class TransposeKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.inputs[0];
    const CopyView view = TransposeCopyView(x.shape, ctx.Params<TransposeParams>());
    copy_.Init(ctx, view.shape, view.strides, view.offset, DTypeSize(x.dtype));
  }
  void Run(const KernelIO& io) const override { copy_.Run(io.inputs[0], io.outputs[0], io.pool); }

 private:
  StridedCopy copy_;
};

}  // namespace

void RegisterTensorTransposeKernels(KernelRegistry& r) {
  r.Register(OpId::kTranspose, {KAIWU_ALL_DTYPES}, &MakeKernel<TransposeKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
