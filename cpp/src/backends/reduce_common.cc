// Host-side geometry of the Reduce* ops (see reduce_common.h).
#include "backends/reduce_common.h"

namespace kaiwu {
namespace reduce {

std::vector<bool> ReducedDims(const PrepareContext& ctx, int64_t rank, bool* copy) {
  std::vector<int64_t> axes =
      ctx.HasInput(1) ? ctx.ConstInts(1) : ctx.node.GetInts("axes", std::vector<int64_t>{});
  const bool noop = ctx.node.GetInt("noop_with_empty_axes", 0) != 0;
  *copy = axes.empty() && noop;
  std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty() && !noop);
  for (int64_t a : axes) {
    int64_t ax = a < 0 ? a + rank : a;
    if (ax < 0 || ax >= rank) ctx.Error("axis ", a, " is out of range for rank ", rank);
    if (reduced[ax]) ctx.Error("axis ", a, " is repeated");
    reduced[ax] = true;
  }
  return reduced;
}

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
