#include "backends/cpu/quant_kernels.h"

namespace kaiwu {
namespace cpu {

void RegisterQuantKernels(KernelRegistry& r) {
  RegisterQuantLinearKernels(r);
  RegisterQuantMatMulKernels(r);
  RegisterQuantConvKernels(r);
  RegisterQuantPackKernel(r);
  RegisterQuantFusedKernels(r);
  RegisterQuantLookupKernel(r);
  RegisterQuantAddKernel(r);
}

}  // namespace cpu
}  // namespace kaiwu
