#include "backends/coverage.h"

namespace kaiwu {

#ifdef KAIWU_WITH_CUDA
const KernelRegistry& CudaKernels();                          // backends/cuda/register.cc
std::vector<std::pair<OpId, std::string>> CudaKernelGaps();  // likewise
#endif

std::vector<KernelTable> KernelTables() {
  std::vector<KernelTable> tables;
  tables.push_back(KernelTable{"cpu", &CpuKernels(), {}});
#ifdef KAIWU_WITH_CUDA
  tables.push_back(KernelTable{"cuda", &CudaKernels(), CudaKernelGaps()});
#endif
  return tables;
}

}  // namespace kaiwu
