// The Reduce* ops' arithmetic and geometry, shared by the CPU kernel
// (cpu/reduce.cc) and the CUDA kernel (cuda/tensor_reduce.cu): how each reduce
// kind (ops/reduce.h) accumulates (identity, combine, final transform; usable
// in device code), and the merged dims both kernels walk. Which dims a node
// reduces is the op layer's (ReduceParams).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/host_device.h"
#include "kaiwu/tensor.h"
#include "ops/reduce.h"

namespace kaiwu {
namespace reduce {

// How elements are accumulated (map, then combine).
enum class Accum { kSum, kSumAbs, kSumSquare, kProd, kMax, kMin };

KAIWU_HOST_DEVICE inline Accum AccumOf(ReduceKind k) {
  switch (k) {
    case ReduceKind::kMax: case ReduceKind::kLogSumExp: return Accum::kMax;
    case ReduceKind::kMin: return Accum::kMin;
    case ReduceKind::kProd: return Accum::kProd;
    case ReduceKind::kL1: return Accum::kSumAbs;
    case ReduceKind::kL2: case ReduceKind::kSumSquare: return Accum::kSumSquare;
    default: return Accum::kSum;
  }
}

// The value an accumulation starts from (host only: the CUDA kernel takes it as
// an argument).
template <typename T>
T Identity(Accum a) {
  switch (a) {
    case Accum::kProd: return T(1);
    case Accum::kMax:
      return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                  : std::numeric_limits<T>::lowest();
    case Accum::kMin:
      return std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                  : std::numeric_limits<T>::max();
    default: return T(0);
  }
}

template <typename T>
KAIWU_HOST_DEVICE inline T Combine(Accum a, T x, T y) {
  switch (a) {
    case Accum::kProd: return x * y;
    case Accum::kMax: return x < y ? y : x;  // std::max(x, y)
    case Accum::kMin: return y < x ? y : x;  // std::min(x, y)
    default: return x + y;
  }
}

// The final transform of an accumulated value (LogSumExp is handled apart).
template <typename T>
KAIWU_HOST_DEVICE inline T Finish(ReduceKind k, T acc, int64_t count) {
  switch (k) {
    case ReduceKind::kMean:
      if constexpr (std::is_floating_point_v<T>) return acc / static_cast<T>(count);
      return count == 0 ? T(0) : static_cast<T>(acc / static_cast<T>(count));
    case ReduceKind::kL2: return static_cast<T>(sqrt(static_cast<double>(acc)));
    case ReduceKind::kLogSum: return static_cast<T>(log(static_cast<double>(acc)));
    default: return acc;
  }
}

/// One dim of a reduction after merging: its size, its input stride, whether
/// it is reduced.
struct MergedDim {
  int64_t size;
  int64_t stride;
  bool reduced;
};

/// The input dims with those of size 1 dropped and neighbours that are both
/// kept or both reduced merged, with their row-major input strides, outermost
/// first. Empty when every dim has size 1.
std::vector<MergedDim> MergeReduceDims(const Shape& in, const std::vector<bool>& reduced);

}  // namespace reduce
}  // namespace kaiwu
