// Row-major float32 GEMMs through column-major cuBLAS: a row-major [m, n]
// matrix is its column-major transpose, so C = op(A) op(B) runs as
// C^T = op(B)^T op(A)^T, i.e. cuBLAS with the operands swapped and m, n swapped.
#include <climits>

#include "backends/cuda/gemm_util.h"

namespace kaiwu {
namespace cuda {

void RowMajorSgemm(const DeviceContext& dev, bool trans_a, bool trans_b, int64_t m, int64_t n,
                   int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                   float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    CheckCuda(cudaMemset2DAsync(c, ldc * sizeof(float), 0, n * sizeof(float), m, dev.stream),
              "GEMM zero fill");
    return;
  }
  const float beta = 0.f;
  CheckBlas(cublasSgemm(dev.blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                        trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                        static_cast<int>(m), static_cast<int>(k), &alpha, b, static_cast<int>(ldb),
                        a, static_cast<int>(lda), &beta, c, static_cast<int>(ldc)),
            "cublasSgemm");
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

void CheckBlasInt(const PrepareContext& ctx, int64_t value, const char* what) {
  if (value > INT_MAX)
    Fail(StatusCode::kUnsupported, ctx.node.Describe(), ": ", what, " ", value,
         " exceeds cuBLAS's int and is not supported by the CUDA backend");
}

}  // namespace cuda
}  // namespace kaiwu
