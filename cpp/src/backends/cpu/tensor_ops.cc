#include "backends/cpu/cpu_kernels.h"

namespace kaiwu {
namespace cpu {

void RegisterTensorKernels(KernelRegistry& r) { (void)r; }

}  // namespace cpu
}  // namespace kaiwu
