#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/linalg_util.h"

namespace kaiwu {
namespace cpu {

void RegisterLinalgKernels(KernelRegistry& r) {
  RegisterGemmKernel(r);
  RegisterMatMulKernel(r);
  RegisterEinsumKernel(r);
  RegisterPackedGemmKernel(r);
  RegisterAttentionKernel(r);
}

}  // namespace cpu
}  // namespace kaiwu
