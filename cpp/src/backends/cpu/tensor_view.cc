// Pure views: Reshape, Flatten, Squeeze, Unsqueeze, Identity and inference-mode
// Dropout. The op layer (ops/tensor_view.cc) computed the shape and declared
// output 0 an alias of input 0; Run copies only when the planner declined.
#include <cstring>
#include <string>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/tensor_util.h"
#include "ops/tensor.h"

namespace kaiwu {
namespace cpu {
namespace {

class ViewKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    bytes_ = static_cast<size_t>(ctx.inputs[0].size()) * DTypeSize(ctx.inputs[0].dtype);
  }
  void Run(const KernelIO& io) const override {
    if (io.outputs[0] != io.inputs[0]) ParallelCopy(io.outputs[0], io.inputs[0], bytes_, io.pool);
  }

 private:
  size_t bytes_ = 0;
};

// Inference-mode Dropout: output 0 is the input, the optional mask is all true.
// A training_mode input not known at plan time is checked when the step runs.
class DropoutKernel : public ViewKernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    ViewKernel::Prepare(ctx);
    check_training_ = ctx.HasInput(2);
    if (check_training_) desc_ = ctx.node.Describe();
    mask_count_ = ctx.outputs.size() > 1 && ctx.outputs[1].present ? ctx.outputs[1].size() : 0;
  }

  void Run(const KernelIO& io) const override {
    if (check_training_ && io.inputs[2] && *static_cast<const bool*>(io.inputs[2]))
      Fail(StatusCode::kRuntime, desc_, ": training-mode dropout is not supported");
    ViewKernel::Run(io);
    if (mask_count_ > 0 && io.outputs[1] != nullptr)
      std::memset(io.outputs[1], 1, static_cast<size_t>(mask_count_));
  }

 private:
  bool check_training_ = false;
  std::string desc_;
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

}  // namespace cpu
}  // namespace kaiwu
