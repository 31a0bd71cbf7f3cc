#include "backends/coverage.h"

namespace kaiwu {

#ifdef KAIWU_WITH_CUDA
const KernelRegistry& CudaKernels();                          // backends/cuda/register.cc
std::vector<std::pair<OpId, std::string>> CudaKernelGaps();  // likewise
#endif

std::vector<KernelTable> KernelTables() {
  std::vector<KernelTable> tables;
  tables.push_back(KernelTable{
      "cpu",
      &CpuKernels(),
      {{OpId::kFusedMlp, "device-only: passes/fuse_mlp.cc makes it for half-precision device sessions; CPU sessions keep the Gemms"}}});
#ifdef KAIWU_WITH_CUDA
  tables.push_back(KernelTable{"cuda", &CudaKernels(), CudaKernelGaps()});
#endif
  return tables;
}

}  // namespace kaiwu
