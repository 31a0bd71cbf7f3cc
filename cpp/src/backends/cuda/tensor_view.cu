// Pure views: Reshape, Flatten, Squeeze, Unsqueeze, Identity, and Dropout in
// inference mode. The op layer (ops/tensor_view.cc) computed the shape and
// declared output 0 an alias of input 0; Run copies only when the planner gave
// separate buffers.
#include "backends/cuda/tensor_util.cuh"
#include "ops/tensor.h"

namespace kaiwu {
namespace cuda {
namespace tensor {
namespace {

class ViewKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    CopyAsync(io.outputs[0], io.inputs[0], bytes_, Dev(io).stream, "view copy");
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    bytes_ = static_cast<size_t>(ctx.inputs[0].size()) * DTypeSize(ctx.inputs[0].dtype);
  }

  size_t bytes_ = 0;
};

// Reports an error when training_mode (a device bool) is true.
__global__ void CheckInferenceGpu(const bool* training_mode, int* error_flag, int step) {
  if (*training_mode) ReportError(error_flag, step);
}

// Inference-mode Dropout: output 0 is the input; the optional mask is all true.
// A training_mode input unknown at plan time is checked on the device.
class DropoutKernel : public ViewKernel {
 public:
  void Run(const KernelIO& io) const override {
    const DeviceContext& dev = Dev(io);
    if (check_training_ && io.inputs[2]) {
      CheckInferenceGpu<<<1, 1, 0, dev.stream>>>(static_cast<const bool*>(io.inputs[2]),
                                                    dev.error_flag, dev.step);
      CheckLaunch("Dropout training_mode check");
    }
    ViewKernel::Run(io);
    if (mask_count_ > 0 && io.outputs[1] != nullptr)
      CheckCuda(cudaMemsetAsync(io.outputs[1], 1, static_cast<size_t>(mask_count_), dev.stream),
                "Dropout mask fill");
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    ViewKernel::PrepareDevice(ctx);
    // Shape inference already failed for a training_mode known to be true.
    check_training_ = ctx.HasInput(2) && ctx.inputs[2].data == nullptr;
    const bool mask = ctx.node.outputs.size() > 1 && ctx.node.outputs[1] >= 0;
    mask_count_ = mask ? ctx.outputs[1].size() : 0;
  }

 private:
  bool check_training_ = false;
  int64_t mask_count_ = 0;  // 0 without a mask output
};

}  // namespace

void RegisterTensorViewKernels(KernelRegistry& r) {
  r.Register(OpId::kReshape, {KAIWU_ALL_DTYPES}, &MakeKernel<ViewKernel>);
  r.Register(OpId::kFlatten, {KAIWU_ALL_DTYPES}, &MakeKernel<ViewKernel>);
  r.Register(OpId::kSqueeze, {KAIWU_ALL_DTYPES}, &MakeKernel<ViewKernel>);
  r.Register(OpId::kUnsqueeze, {KAIWU_ALL_DTYPES}, &MakeKernel<ViewKernel>);
  r.Register(OpId::kIdentity, {KAIWU_ALL_DTYPES}, &MakeKernel<ViewKernel>);
  r.Register(OpId::kDropout, {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16},
             &MakeKernel<DropoutKernel>);
}

}  // namespace tensor
}  // namespace cuda
}  // namespace kaiwu
