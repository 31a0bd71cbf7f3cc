// Slice: starts/ends/axes/steps inputs (opset 10+; attributes before), with
// ONNX clamping and negative steps (ComputeSliceView, copy_geometry.h); runs
// as a strided copy.
#include <utility>

#include "backends/copy_geometry.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/tensor_util.h"

namespace kaiwu {
namespace cpu {
namespace {

class SliceKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const DType dtype = ctx.in(0).dtype;
    SliceView view = ComputeSliceView(ctx);
    copy_.Init(ctx, view.shape, view.strides, view.offset, DTypeSize(dtype));
    ctx.SetOutput(0, dtype, std::move(view.shape));
  }

  void Run(const KernelIO& io) const override { copy_.Run(io.inputs[0], io.outputs[0], io.pool); }

 private:
  StridedCopy copy_;
};

}  // namespace

void RegisterTensorSliceKernels(KernelRegistry& r) {
  r.Register(OpId::kSlice, kAnyDType, &MakeKernel<SliceKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
