// The CUDA elementwise op family; each concept lives in its own elementwise_*.cu.
#include "backends/cuda/elementwise_util.cuh"

namespace kaiwu {
namespace cuda {

void RegisterElementwiseKernels(KernelRegistry& r) {
  RegisterUnaryKernels(r);
  RegisterArithmeticKernels(r);
  RegisterCompareKernels(r);
  RegisterCastKernels(r);
  RegisterSoftmaxKernels(r);
  RegisterFusedKernels(r);
}

}  // namespace cuda
}  // namespace kaiwu
