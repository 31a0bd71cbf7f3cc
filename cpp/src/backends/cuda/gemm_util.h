// What the CUDA linear-algebra kernels (Gemm, MatMul in gemm.cu; LSTM, GRU in
// rnn*.cu) share: row-major float32 GEMMs through cuBLAS, the check that a
// size fits cuBLAS's int, and the registration of the recurrent and Einsum
// kernels.
#pragma once

#include <cstdint>

#include "backends/cuda/cuda_kernels.h"

namespace kaiwu {
namespace cuda {

/// Row-major C[m, n] = alpha * op(A) * op(B), op(A) [m, k], op(B) [k, n]; lda,
/// ldb, ldc are the row strides of A, B, C as stored. C is overwritten (beta 0);
/// k == 0 zero-fills C. FP32 math, on dev.stream through dev.blas; with `tf32`
/// the products round A and B to TF32 on tensor cores (float32 accumulation):
/// the float32 recurrent GEMMs of a half-precision session (Node::tf32_gemms).
void RowMajorSgemm(const DeviceContext& dev, bool trans_a, bool trans_b, int64_t m, int64_t n,
                   int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                   float* c, int64_t ldc, bool tf32 = false);

/// Row-major C[m, n] (float32) = A[m, k] * B[n, k]^T with A and B float16 (or
/// bfloat16 with `bf16`), row strides lda, ldb, ldc: tensor cores, float32
/// accumulation (a half session's recurrent input projection). k == 0 zero-fills C.
void RowMajorGemmHalfIn(const DeviceContext& dev, bool bf16, int64_t m, int64_t n, int64_t k,
                        const void* a, int64_t lda, const void* b, int64_t ldb, float* c,
                        int64_t ldc);

/// `batch` dense row-major products C_i[m, n] = A_i[m, k] * B_i[k, n] with
/// A_i = a + i * stride_a (stride 0: one A for all), B_i = b + i * stride_b and
/// C_i = c + i * m * n. k == 0 zero-fills C.
void RowMajorSgemmStridedBatched(const DeviceContext& dev, int64_t m, int64_t n, int64_t k,
                                 const float* a, int64_t stride_a, const float* b, int64_t stride_b,
                                 float* c, int64_t batch);

/// Column-major cuBLAS GEMM over `batch` products (strides in elements),
/// C_i = alpha * op(A_i) op(B_i), beta 0, float accumulation. T is float
/// (cublasSgemm*), __half or __nv_bfloat16 (cublasGemm*Ex with
/// CUBLAS_COMPUTE_32F: tensor cores). Every size must fit cuBLAS's int.
template <typename T>
void GemmStridedBatched(const DeviceContext& dev, cublasOperation_t ta, cublasOperation_t tb,
                        int64_t m, int64_t n, int64_t k, float alpha, const T* a, int64_t lda,
                        int64_t stride_a, const T* b, int64_t ldb, int64_t stride_b, T* c,
                        int64_t ldc, int64_t stride_c, int64_t batch, const char* what);

/// RowMajorSgemm and RowMajorSgemmStridedBatched for any GemmStridedBatched T.
template <typename T>
void RowMajorGemm(const DeviceContext& dev, bool trans_a, bool trans_b, int64_t m, int64_t n,
                  int64_t k, float alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
                  int64_t ldc);
/// trans_b: each B_i is stored [n, k] (row stride k) and read transposed.
template <typename T>
void RowMajorGemmStridedBatched(const DeviceContext& dev, int64_t m, int64_t n, int64_t k,
                                const T* a, int64_t stride_a, const T* b, int64_t stride_b, T* c,
                                int64_t batch, bool trans_b = false);

/// Throws kUnsupported naming the node when `value` (a GEMM size or leading
/// dimension called `what`) exceeds cuBLAS's int.
void CheckBlasInt(const PrepareContext& ctx, int64_t value, const char* what);

void RegisterRnnKernels(KernelRegistry& r);    // rnn.cu
void RegisterEinsumKernel(KernelRegistry& r);  // einsum.cu
void RegisterFusedMlpKernel(KernelRegistry& r);  // fused_mlp.cu
void RegisterAttentionKernel(KernelRegistry& r);  // attention.cu

}  // namespace cuda
}  // namespace kaiwu
