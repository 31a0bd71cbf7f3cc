#include "backends/cpu/game_util.h"

namespace kaiwu {
namespace cpu {

void RegisterGameKernels(KernelRegistry& r) {
  RegisterGameResizeKernels(r);
  RegisterGameOneHotKernels(r);
  RegisterGameGatherNDKernels(r);
  RegisterGameScatterNDKernels(r);
  RegisterGameScatterElementsKernels(r);
  RegisterGameTopKKernels(r);
  RegisterGameCumSumKernels(r);
}

std::vector<int64_t> RowMajorStrides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
  return s;
}

}  // namespace cpu
}  // namespace kaiwu
