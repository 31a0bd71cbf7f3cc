// The CPU backend: one registration function per op family, and helpers the
// families share (GEMM, dtype dispatch, axis handling).
#pragma once

#include <cstdint>

#include "backends/kernel.h"
#include "core/dtype_dispatch.h"

namespace kaiwu {
namespace cpu {

void RegisterElementwiseKernels(KernelRegistry& r);  // elementwise.cc
void RegisterLinalgKernels(KernelRegistry& r);       // gemm.cc, matmul.cc, einsum.cc
void RegisterConvKernels(KernelRegistry& r);         // conv.cc, pool.cc
void RegisterNormKernels(KernelRegistry& r);         // norm.cc (BatchNorm, LayerNorm)
void RegisterReduceKernels(KernelRegistry& r);       // reduce.cc, softmax.cc
void RegisterRnnKernels(KernelRegistry& r);          // rnn.cc (LSTM, GRU)
void RegisterTensorKernels(KernelRegistry& r);       // shape.cc, gather.cc, slice.cc, ...
void RegisterGameKernels(KernelRegistry& r);         // game_*.cc (Resize, TopK, ScatterND, ...)
void RegisterFusedKernels(KernelRegistry& r);        // fused_*.cc (domain "kaiwu")

/// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major with leading
/// dimensions; beta == 0 ignores C's old contents. Splits rows (or columns when
/// M is small) across the pool. With 2 to 16 rows and op(A) = A, SIMD kernels
/// read B in place (no packing, no allocation); otherwise Eigen.
void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc, ThreadPool* pool);


}  // namespace cpu
}  // namespace kaiwu

