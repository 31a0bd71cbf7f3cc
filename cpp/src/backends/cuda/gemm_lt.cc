// LtGemm (gemm_lt.h): cuBLASLt matmuls with the bias / ReLU epilogue.
#include "backends/cuda/gemm_lt.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

namespace kaiwu {
namespace cuda {
namespace {

// Plan-time heuristic queries go through one handle per device, serialized
// (as cuDNN's, dnn.cc); a run uses its own context's handle.
template <typename Fn>
bool WithQueryHandle(Fn&& fn) {
  static std::mutex mu;
  static auto* handles = new std::map<int, cublasLtHandle_t>();  // process lifetime
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  std::lock_guard<std::mutex> lock(mu);
  cublasLtHandle_t& h = (*handles)[device];
  if (!h && cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    h = nullptr;
    return false;
  }
  return fn(h);
}

bool Ok(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; }

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

size_t ElemBytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

// cuBLASLt takes its (read-only here) layouts through non-const pointers.
cublasLtMatrixLayout_t L(const cublasLtMatrixLayoutOpaque_t& l) {
  return const_cast<cublasLtMatrixLayoutOpaque_t*>(&l);
}

}  // namespace

bool LtEnabled() {
  const char* env = std::getenv("KAIWU_CUBLASLT");
  return !(env && std::string(env) == "0");
}

void* CreateLtHandle() {
  cublasLtHandle_t h = nullptr;
  CheckBlas(cublasLtCreate(&h), "cublasLtCreate");
  return h;
}

void DestroyLtHandle(void* handle) {
  if (handle) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle));
}

bool LtGemm::InitDesc(cublasLtMatmulDescOpaque_t* desc) const {
  if (!Ok(cublasLtMatmulDescInit(desc, CUBLAS_COMPUTE_32F, CUDA_R_32F))) return false;
  const cublasLtEpilogue_t epi = bias_ ? (relu_ ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                       : (relu_ ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
  return Ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_b_, sizeof(op_b_))) &&
         Ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_a_, sizeof(op_a_))) &&
         Ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
}

bool LtGemm::Plan(cudaDataType_t type, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                  int64_t lda, int64_t ldb, int64_t ldc, bool bias, bool relu) {
  planned_ = false;
  if (!LtEnabled() || m <= 0 || n <= 0 || k <= 0) return false;
  // 16-byte rows: the alignment the heuristics are told every pointer has.
  const int64_t per16 = 16 / static_cast<int64_t>(ElemBytes(type));
  if (lda % per16 || ldb % per16 || ldc % per16) return false;
  type_ = type;
  bias_ = bias;
  relu_ = relu;
  // Row-major X [r, c] with row stride ld is column-major X^T [c, r] with ld:
  // C^T = op(B)^T op(A)^T, B^T as cuBLASLt's "A" and A^T as its "B".
  op_b_ = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  op_a_ = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  if (!Ok(cublasLtMatrixLayoutInit(&layout_b_, type, trans_b ? u(k) : u(n), trans_b ? u(n) : u(k), ldb)) ||
      !Ok(cublasLtMatrixLayoutInit(&layout_a_, type, trans_a ? u(m) : u(k), trans_a ? u(k) : u(m), lda)) ||
      !Ok(cublasLtMatrixLayoutInit(&layout_c_, type, u(n), u(m), ldc)))
    return false;
  cublasLtMatmulDescOpaque_t desc;
  if (!InitDesc(&desc)) return false;
  // The heuristics read the bias pointer's alignment from its value: promise 16 bytes
  // (what Run checks), not the any-alignment of a null pointer.
  const void* bias16 = reinterpret_cast<const void*>(uintptr_t{16});
  if (bias_ && !Ok(cublasLtMatmulDescSetAttribute(&desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias16,
                                                  sizeof(bias16))))
    return false;
  cublasLtMatmulPreferenceOpaque_t pref;
  const uint64_t max_ws = kBlasWorkspaceBytes;
  const uint32_t align = 16;
  if (!Ok(cublasLtMatmulPreferenceInit(&pref)) ||
      !Ok(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws,
                                               sizeof(max_ws))))
    return false;
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    if (!Ok(cublasLtMatmulPreferenceSetAttribute(&pref, attr, &align, sizeof(align)))) return false;
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const bool ok = WithQueryHandle([&](cublasLtHandle_t h) {
    return Ok(cublasLtMatmulAlgoGetHeuristic(h, &desc, &layout_b_, &layout_a_, &layout_c_, &layout_c_,
                                             &pref, 1, &result, &found));
  });
  if (!ok || found < 1 || result.state != CUBLAS_STATUS_SUCCESS || result.workspaceSize > max_ws)
    return false;
  algo_ = result.algo;
  workspace_ = result.workspaceSize;
  planned_ = true;
  return true;
}

bool LtGemm::Run(const DeviceContext& dev, float alpha, const void* a, const void* b, void* c,
                 const void* bias) const {
  if (!planned_ || !dev.lt || !Aligned16(a) || !Aligned16(b) || !Aligned16(c) ||
      (bias_ && !Aligned16(bias)) || workspace_ > dev.workspace_bytes)
    return false;
  cublasLtMatmulDescOpaque_t desc;
  CheckBlas(InitDesc(&desc) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INTERNAL_ERROR,
            "cublasLtMatmulDescInit");
  if (bias_)
    CheckBlas(cublasLtMatmulDescSetAttribute(&desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
              "cublasLtMatmulDescSetAttribute (bias)");
  const float beta = 0.f;
  CheckBlas(cublasLtMatmul(static_cast<cublasLtHandle_t>(dev.lt), &desc, &alpha, b, L(layout_b_), a,
                           L(layout_a_), &beta, c, L(layout_c_), c, L(layout_c_), &algo_, dev.workspace,
                           dev.workspace_bytes, dev.stream),
            "cublasLtMatmul");
  return true;
}

}  // namespace cuda
}  // namespace kaiwu
