// Host-side geometry of the Reduce* ops (see reduce_common.h).
#include "backends/reduce_common.h"

namespace kaiwu {
namespace reduce {

std::vector<MergedDim> MergeReduceDims(const Shape& in, const std::vector<bool>& reduced) {
  std::vector<MergedDim> merged;
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] == 1) continue;
    if (!merged.empty() && merged.back().reduced == reduced[d])
      merged.back().size *= in[d];
    else
      merged.push_back({in[d], 1, reduced[d]});
  }
  int64_t stride = 1;
  for (size_t i = merged.size(); i-- > 0;) {
    merged[i].stride = stride;
    stride *= merged[i].size;
  }
  return merged;
}

}  // namespace reduce
}  // namespace kaiwu
