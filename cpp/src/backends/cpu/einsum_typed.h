// Dtype-generic pieces of the Einsum kernel: the strided gather of float32 or
// float64 elements (a double moves as two floats, i.e. one more dim of size 2
// with stride 1) and the batched GEMM (Sgemm for float32, a plain loop otherwise).
#pragma once

#include <type_traits>

#include "backends/cpu/linalg_util.h"

namespace kaiwu {
namespace cpu {

/// A strided gather of elements of `ratio` floats (1: float, 2: double); built
/// from element strides scaled by `ratio` plus a trailing {ratio} dim of stride 1.
struct TypedGather {
  StridedGather g;
  int ratio = 1;
  int64_t size() const { return g.size() / ratio; }
  bool contiguous() const { return g.contiguous(); }
  template <typename T>
  void Run(const T* src, T* dst, ThreadPool* pool) const {
    g.Run(reinterpret_cast<const float*>(src), reinterpret_cast<float*>(dst), pool);
  }
};

template <typename T>
void Gemm(const BatchedGemm& g, const T* a, const T* b, T* c, ThreadPool* pool) {
  if constexpr (std::is_same_v<T, float>) {
    g.Run(a, b, c, pool);
  } else {
    BatchedGemmNaive<T>(g, a, b, c, pool);
  }
}

}  // namespace cpu
}  // namespace kaiwu
