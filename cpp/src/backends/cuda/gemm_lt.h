// Row-major GEMMs with their bias / ReLU epilogue on cuBLASLt: the bias add
// and activation run inside the GEMM's own kernel instead of a separate
// epilogue kernel after it (one graph node and one pass over C fewer).
#pragma once

#include <cublasLt.h>

#include <cstdint>

#include "backends/cuda/cuda_kernels.h"

namespace kaiwu {
namespace cuda {

/// C[m, n] = act(alpha * op(A) op(B) + bias[col]) for row-major A, B, C with
/// row strides lda, ldb, ldc (as stored), float accumulation; `type` is
/// CUDA_R_32F, CUDA_R_16F or CUDA_R_16BF for A, B, C and the bias.
/// Plan() asks cuBLASLt's heuristics once (plan time, no stream work) and
/// returns false where it has no algorithm for the shape and epilogue; Run()
/// then queues nothing and returns false, as it does when a pointer is not
/// 16-byte aligned: the caller keeps its own GEMM + epilogue path. Run is const
/// and may be called from several run contexts at once (the descriptor is built
/// on the stack per call; the layouts and the algorithm are read only).
class LtGemm {
 public:
  bool Plan(cudaDataType_t type, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
            int64_t lda, int64_t ldb, int64_t ldc, bool bias, bool relu);
  bool Run(const DeviceContext& dev, float alpha, const void* a, const void* b, void* c,
           const void* bias) const;
  bool planned() const { return planned_; }

 private:
  bool InitDesc(cublasLtMatmulDescOpaque_t* desc) const;

  bool planned_ = false, bias_ = false, relu_ = false;
  cudaDataType_t type_ = CUDA_R_32F;
  cublasOperation_t op_b_ = CUBLAS_OP_N, op_a_ = CUBLAS_OP_N;
  // Column-major view: C^T [n, m] = op(B)^T [n, k] * op(A)^T [k, m].
  cublasLtMatrixLayoutOpaque_t layout_b_{}, layout_a_{}, layout_c_{};
  cublasLtMatmulAlgo_t algo_{};
  size_t workspace_ = 0;
};

/// True unless KAIWU_CUBLASLT is "0" (read per call): GEMMs whose bias and
/// activation cuBLASLt can apply take LtGemm (the A/B switch of bench/notes/cuda.md).
bool LtEnabled();

/// A cuBLASLt handle (DeviceContext::lt) and its release.
void* CreateLtHandle();
void DestroyLtHandle(void* handle);

/// Bytes of the workspace every run context gives cuBLAS and cuBLASLt (one per stream).
constexpr size_t kBlasWorkspaceBytes = 32u << 20;  // cuBLAS's advice for Hopper

}  // namespace cuda
}  // namespace kaiwu
