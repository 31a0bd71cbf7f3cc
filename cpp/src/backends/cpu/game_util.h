// Shared pieces of the game-policy CPU kernels (game_*.cc): Resize, OneHot,
// GatherND/ScatterND, ScatterElements, TopK and CumSum. Index-taking kernels
// validate every index on the calling thread before writing anything; an
// out-of-range index throws kaiwu::Error(kRuntime) naming the node and index.
// What the ops mean (the Reduction modes, the params structs)
// is the op layer's: ops/game.h, ops/resize.h.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "ops/game.h"

namespace kaiwu {
namespace cpu {

// Registration, one function per file; RegisterGameKernels calls them all.
void RegisterGameResizeKernels(KernelRegistry& r);          // game_resize.cc
void RegisterGameOneHotKernels(KernelRegistry& r);          // game_onehot.cc
void RegisterGameGatherNDKernels(KernelRegistry& r);        // game_gather_nd.cc
void RegisterGameScatterNDKernels(KernelRegistry& r);       // game_scatter_nd.cc
void RegisterGameScatterElementsKernels(KernelRegistry& r); // game_scatter_elements.cc
void RegisterGameTopKKernels(KernelRegistry& r);            // game_topk.cc
void RegisterGameCumSumKernels(KernelRegistry& r);          // game_cumsum.cc

/// `v` as an index into an axis of size `dim` (negative counts from the end),
/// or throws kRuntime naming `desc`, the index and its position.
inline int64_t CheckedIndex(int64_t v, int64_t dim, const std::string& desc, int64_t position) {
  if (v < -dim || v >= dim)
    Fail(StatusCode::kRuntime, desc, ": index ", v, " (at position ", position,
         ") is out of range for an axis of size ", dim);
  return v < 0 ? v + dim : v;
}

/// dst = r(dst, v) (the op layer's Reduction); for bool, add/max are OR and mul/min AND.
template <typename T>
inline void Reduce(Reduction r, T& dst, T v) {
  if constexpr (std::is_same_v<T, bool>) {
    switch (r) {
      case Reduction::kNone: dst = v; break;
      case Reduction::kAdd: case Reduction::kMax: dst = dst || v; break;
      case Reduction::kMul: case Reduction::kMin: dst = dst && v; break;
    }
  } else {
    switch (r) {
      case Reduction::kNone: dst = v; break;
      case Reduction::kAdd: dst = static_cast<T>(dst + v); break;
      case Reduction::kMul: dst = static_cast<T>(dst * v); break;
      case Reduction::kMax: dst = dst < v ? v : dst; break;
      case Reduction::kMin: dst = v < dst ? v : dst; break;
    }
  }
}

/// Row-major element strides of `shape`.
std::vector<int64_t> RowMajorStrides(const Shape& shape);

}  // namespace cpu
}  // namespace kaiwu
