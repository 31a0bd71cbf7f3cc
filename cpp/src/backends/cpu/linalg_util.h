// Helpers the linear-algebra kernels (Gemm, MatMul, Einsum) share: a batched
// GEMM over offset tables, and a strided N-d gather into contiguous memory.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/cpu_kernels.h"

namespace kaiwu {
namespace cpu {

void RegisterGemmKernel(KernelRegistry& r);    // gemm_kernel.cc
void RegisterMatMulKernel(KernelRegistry& r);  // matmul_kernel.cc
void RegisterEinsumKernel(KernelRegistry& r);  // einsum_kernel.cc
void RegisterPackedGemmKernel(KernelRegistry& r);  // gemm_packed_kernel.cc
void RegisterAttentionKernel(KernelRegistry& r);  // attention_kernel.cc

/// `batch` products C_i[M,N] = op(A_i)[M,K] * op(B_i)[K,N], A_i at a + a_off[i]
/// (or a + i * a_stride when a_off is null), likewise B_i; C_i is contiguous at
/// c + i * M * N. Parallel over the batch when there are enough products,
/// otherwise each product is split across the pool.
struct BatchedGemm {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t a_stride = 0, b_stride = 0;
  std::vector<int64_t> a_off, b_off;  // empty: use the strides

  void Run(const float* a, const float* b, float* c, ThreadPool* pool) const;
};

/// Generic-type version for non-float dtypes (a plain loop, no transposes).
template <typename T>
void BatchedGemmNaive(const BatchedGemm& g, const T* a, const T* b, T* c, ThreadPool* pool) {
  double cost = 2.0 * static_cast<double>(g.m * g.n * g.k);
  pool->ParallelFor(g.batch, cost, [&](int64_t b0, int64_t b1) {
    for (int64_t i = b0; i < b1; ++i) {
      const T* ai = a + (g.a_off.empty() ? i * g.a_stride : g.a_off[i]);
      const T* bi = b + (g.b_off.empty() ? i * g.b_stride : g.b_off[i]);
      T* ci = c + i * g.m * g.n;
      for (int64_t r = 0; r < g.m; ++r) {
        T* row = ci + r * g.n;
        for (int64_t j = 0; j < g.n; ++j) row[j] = T(0);
        for (int64_t p = 0; p < g.k; ++p) {
          T av = ai[r * g.k + p];
          const T* brow = bi + p * g.n;
          for (int64_t j = 0; j < g.n; ++j) row[j] += av * brow[j];
        }
      }
    }
  });
}

/// Copies a strided view (dims, element strides; stride 0 broadcasts) of `src`
/// into contiguous `dst`. Adjacent dims that are contiguous are merged.
class StridedGather {
 public:
  StridedGather() = default;
  StridedGather(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides);

  int64_t size() const { return size_; }
  /// True when the view is already the contiguous layout (a plain copy).
  bool contiguous() const;
  void Run(const float* src, float* dst, ThreadPool* pool) const;

 private:
  std::vector<int64_t> dims_, strides_;
  int64_t size_ = 1;
};

}  // namespace cpu
}  // namespace kaiwu
