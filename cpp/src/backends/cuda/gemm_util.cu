// Row-major float32 GEMMs through column-major cuBLAS: a row-major [m, n]
// matrix is its column-major transpose, so C = op(A) op(B) runs as
// C^T = op(B)^T op(A)^T, i.e. cuBLAS with the operands swapped and m, n swapped.
#include <climits>
#include <type_traits>

#include "backends/cuda/gemm_util.h"
#include "backends/cuda/half.cuh"

namespace kaiwu {
namespace cuda {
namespace {

// C = 0 where k == 0 leaves no product: m rows of n elements of `elem`
// bytes, ldc elements apart.
void ZeroRows(const DeviceContext& dev, void* c, int64_t m, int64_t n, int64_t ldc, size_t elem) {
  CheckCuda(cudaMemset2DAsync(c, ldc * elem, 0, n * elem, m, dev.stream), "GEMM zero fill");
}

}  // namespace

void RowMajorSgemm(const DeviceContext& dev, bool trans_a, bool trans_b, int64_t m, int64_t n,
                   int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                   float* c, int64_t ldc, bool tf32) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    ZeroRows(dev, c, m, n, ldc, sizeof(float));
    return;
  }
  const float beta = 0.f;
  if (tf32) {
    CheckBlas(cublasGemmEx(dev.blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                           trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                           static_cast<int>(m), static_cast<int>(k), &alpha, b, CUDA_R_32F,
                           static_cast<int>(ldb), a, CUDA_R_32F, static_cast<int>(lda), &beta, c,
                           CUDA_R_32F, static_cast<int>(ldc), CUBLAS_COMPUTE_32F_FAST_TF32,
                           CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx (TF32)");
    return;
  }
  CheckBlas(cublasSgemm(dev.blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                        trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                        static_cast<int>(m), static_cast<int>(k), &alpha, b, static_cast<int>(ldb),
                        a, static_cast<int>(lda), &beta, c, static_cast<int>(ldc)),
            "cublasSgemm");
}

void RowMajorGemmHalfIn(const DeviceContext& dev, bool bf16, int64_t m, int64_t n, int64_t k,
                        const void* a, int64_t lda, const void* b, int64_t ldb, float* c,
                        int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    ZeroRows(dev, c, m, n, ldc, sizeof(float));
    return;
  }
  const float alpha = 1.f, beta = 0.f;
  const cudaDataType_t type = bf16 ? CUDA_R_16BF : CUDA_R_16F;
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  CheckBlas(cublasGemmEx(dev.blas, CUBLAS_OP_T, CUBLAS_OP_N, i(n), i(m), i(k), &alpha, b, type,
                         i(ldb), a, type, i(lda), &beta, c, CUDA_R_32F, i(ldc), CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx (16-bit inputs, float32 output)");
}

void RowMajorSgemmStridedBatched(const DeviceContext& dev, int64_t m, int64_t n, int64_t k,
                                 const float* a, int64_t stride_a, const float* b, int64_t stride_b,
                                 float* c, int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  if (k == 0) {
    CheckCuda(cudaMemsetAsync(c, 0, batch * m * n * sizeof(float), dev.stream), "GEMM zero fill");
    return;
  }
  const float alpha = 1.f, beta = 0.f;
  CheckBlas(
      cublasSgemmStridedBatched(dev.blas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n),
                                static_cast<int>(m), static_cast<int>(k), &alpha, b,
                                static_cast<int>(n), stride_b, a, static_cast<int>(k), stride_a,
                                &beta, c, static_cast<int>(n), m * n, static_cast<int>(batch)),
      "cublasSgemmStridedBatched");
}

template <typename T>
void GemmStridedBatched(const DeviceContext& dev, cublasOperation_t ta, cublasOperation_t tb,
                        int64_t m, int64_t n, int64_t k, float alpha, const T* a, int64_t lda,
                        int64_t stride_a, const T* b, int64_t ldb, int64_t stride_b, T* c,
                        int64_t ldc, int64_t stride_c, int64_t batch, const char* what) {
  const float beta = 0.f;
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  if constexpr (std::is_same_v<T, float>) {
    if (batch == 1)
      CheckBlas(cublasSgemm(dev.blas, ta, tb, i(m), i(n), i(k), &alpha, a, i(lda), b, i(ldb), &beta,
                            c, i(ldc)),
                what);
    else
      CheckBlas(cublasSgemmStridedBatched(dev.blas, ta, tb, i(m), i(n), i(k), &alpha, a, i(lda),
                                          stride_a, b, i(ldb), stride_b, &beta, c, i(ldc), stride_c,
                                          i(batch)),
                what);
  } else {
    constexpr cudaDataType_t type = CudaDataType<T>::value;
    if (batch == 1)
      CheckBlas(cublasGemmEx(dev.blas, ta, tb, i(m), i(n), i(k), &alpha, a, type, i(lda), b, type,
                             i(ldb), &beta, c, type, i(ldc), CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT),
                what);
    else
      CheckBlas(cublasGemmStridedBatchedEx(dev.blas, ta, tb, i(m), i(n), i(k), &alpha, a, type,
                                           i(lda), stride_a, b, type, i(ldb), stride_b, &beta, c,
                                           type, i(ldc), stride_c, i(batch), CUBLAS_COMPUTE_32F,
                                           CUBLAS_GEMM_DEFAULT),
                what);
  }
}

template <typename T>
void RowMajorGemm(const DeviceContext& dev, bool trans_a, bool trans_b, int64_t m, int64_t n,
                  int64_t k, float alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
                  int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    ZeroRows(dev, c, m, n, ldc, sizeof(T));
    return;
  }
  GemmStridedBatched<T>(dev, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                        n, m, k, alpha, b, ldb, 0, a, lda, 0, c, ldc, 0, 1, "GEMM");
}

template <typename T>
void RowMajorGemmStridedBatched(const DeviceContext& dev, int64_t m, int64_t n, int64_t k,
                                const T* a, int64_t stride_a, const T* b, int64_t stride_b, T* c,
                                int64_t batch, bool trans_b) {
  if (m == 0 || n == 0 || batch == 0) return;
  if (k == 0) {
    CheckCuda(cudaMemsetAsync(c, 0, batch * m * n * sizeof(T), dev.stream), "GEMM zero fill");
    return;
  }
  GemmStridedBatched<T>(dev, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, 1.f, b,
                        trans_b ? k : n, stride_b, a, k, stride_a, c, n, m * n, batch,
                        "strided batched GEMM");
}

#define KAIWU_GEMM_TYPES(T)                                                                      \
  template void GemmStridedBatched<T>(const DeviceContext&, cublasOperation_t, cublasOperation_t, \
                                      int64_t, int64_t, int64_t, float, const T*, int64_t,       \
                                      int64_t, const T*, int64_t, int64_t, T*, int64_t, int64_t,  \
                                      int64_t, const char*);                                     \
  template void RowMajorGemm<T>(const DeviceContext&, bool, bool, int64_t, int64_t, int64_t,     \
                                float, const T*, int64_t, const T*, int64_t, T*, int64_t);       \
  template void RowMajorGemmStridedBatched<T>(const DeviceContext&, int64_t, int64_t, int64_t,   \
                                              const T*, int64_t, const T*, int64_t, T*, int64_t, \
                                              bool);
KAIWU_GEMM_TYPES(float)
KAIWU_GEMM_TYPES(__half)
KAIWU_GEMM_TYPES(__nv_bfloat16)
#undef KAIWU_GEMM_TYPES

void CheckBlasInt(const PrepareContext& ctx, int64_t value, const char* what) {
  if (value > INT_MAX)
    Fail(StatusCode::kUnsupported, ctx.node.Describe(), ": ", what, " ", value,
         " exceeds cuBLAS's int and is not supported by the CUDA backend");
}

}  // namespace cuda
}  // namespace kaiwu
