// The CUDA elementwise op family; each concept lives in its own elementwise_*.cu.
#include "backends/cuda/elementwise_util.cuh"

namespace kaiwu {
namespace cuda {

void RegisterElementwiseKernels(KernelRegistry& r) {
  eltwise::RegisterUnaryKernels(r);
  eltwise::RegisterArithmeticKernels(r);
  eltwise::RegisterCompareKernels(r);
  eltwise::RegisterCastKernels(r);
  eltwise::RegisterSoftmaxKernels(r);
  eltwise::RegisterFusedKernels(r);
}

}  // namespace cuda
}  // namespace kaiwu
