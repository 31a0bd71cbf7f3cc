// The CPU backend: one registration function per op family, and helpers the
// families share (GEMM, dtype dispatch, axis handling).
#pragma once

#include <cstdint>

#include "backends/kernel.h"

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

/// Normalises a possibly negative axis against `rank`, or fails naming the node.
int64_t NormalizeAxis(const PrepareContext& ctx, int64_t axis, int64_t rank);

/// Numpy broadcasting of two shapes, or fails naming the node.
Shape BroadcastShapes(const PrepareContext& ctx, const Shape& a, const Shape& b);

}  // namespace cpu
}  // namespace kaiwu

/// Calls BODY with `using T = <c++ type>` for the runtime dtype; fails otherwise.
#define KAIWU_DISPATCH_CASE(DT, CT, ...) \
  case ::kaiwu::DType::DT: {             \
    using T = CT;                        \
    __VA_ARGS__;                         \
    break;                               \
  }
#define KAIWU_DISPATCH_ALL(dtype, ...)                                      \
  switch (dtype) {                                                          \
    KAIWU_DISPATCH_CASE(kFloat32, float, __VA_ARGS__)                       \
    KAIWU_DISPATCH_CASE(kFloat64, double, __VA_ARGS__)                      \
    KAIWU_DISPATCH_CASE(kInt8, int8_t, __VA_ARGS__)                         \
    KAIWU_DISPATCH_CASE(kUInt8, uint8_t, __VA_ARGS__)                       \
    KAIWU_DISPATCH_CASE(kInt16, int16_t, __VA_ARGS__)                       \
    KAIWU_DISPATCH_CASE(kInt32, int32_t, __VA_ARGS__)                       \
    KAIWU_DISPATCH_CASE(kInt64, int64_t, __VA_ARGS__)                       \
    KAIWU_DISPATCH_CASE(kBool, bool, __VA_ARGS__)                           \
    default:                                                                \
      ::kaiwu::Fail(::kaiwu::StatusCode::kInternal, "unsupported dtype ",   \
                    ::kaiwu::DTypeName(dtype));                             \
  }
