// The CUDA backend's kernel contract, on top of backends/kernel.h.
//
// Shapes: the op layer (ops/op.h) has inferred the node's outputs and checked
// its attributes before the kernel is made, once for every backend, so both
// backends agree on every shape and every model error. PrepareDevice then
// checks what the CUDA kernel supports beyond its table entry's dtype
// (throwing kUnsupported naming the node and the attribute) and asks for
// device scratch.
//
// Run: every pointer in KernelIO (inputs, outputs, scratch) is device memory.
// Kernels launch asynchronously on Dev(io).stream and never synchronize,
// allocate or copy through the host; cuBLAS calls use Dev(io).blas, which is
// already bound to that stream. A kernel that finds bad data (an index out of
// range) calls ReportError on the device; the run then fails with kRuntime
// naming the node.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <initializer_list>
#include <memory>
#include <string>

#include "backends/kernel.h"

namespace kaiwu {

/// Registry of the CUDA backend, built once.
const KernelRegistry& CudaKernels();
/// Ops the CUDA backend has no kernel for by design, with the reason
/// (backends/coverage.h).
std::vector<std::pair<OpId, std::string>> CudaKernelGaps();

namespace cuda {

/// Per-run device state, one per concurrent run; KernelIO::device points to it.
struct DeviceContext {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  int* error_flag = nullptr;  // device int: 0, or 1 + the step that failed
  int step = 0;               // the step being launched (set by the plan)
  void* dnn = nullptr;        // cudnnHandle_t on `stream`, when the plan asked (kNeedDnnHandle)
  void* lt = nullptr;         // cublasLtHandle_t (gemm_lt.h)
  void* workspace = nullptr;  // cuBLAS's and cuBLASLt's workspace on `stream`
  size_t workspace_bytes = 0;
};

inline const DeviceContext& Dev(const KernelIO& io) {
  return *static_cast<const DeviceContext*>(io.device);
}

/// Throws kRuntime (or kUnsupported for a missing device) naming `what`.
void CheckCuda(cudaError_t err, const char* what);
void CheckBlas(cublasStatus_t status, const char* what);
/// Checks the launch just made (cudaGetLastError).
void CheckLaunch(const char* what);

/// Blocks per thread-block cluster the tensor-core GRU sequence kernel uses for
/// `batch` rows of `hidden` units on the current device: 4 or 2 where such
/// clusters of one 16-row tile each all fit at once (sm_90), else 1 (one block
/// per tile). KAIWU_GRU_CLUSTER caps it (1: never split).
int GruSequenceClusterSize(int64_t batch, int64_t hidden);

/// Threads per block for one-thread-per-element kernels, and the grid for n elements.
constexpr int kBlock = 256;
inline unsigned GridFor(int64_t n) {
  int64_t g = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(g < 1 ? 1 : (g > 65535LL * 64 ? 65535LL * 64 : g));
}

/// Throws kUnsupported naming the node: "<node>: <what> is not supported by the CUDA backend".
template <typename... Args>
[[noreturn]] void Unsupported(const PrepareContext& ctx, const Args&... what) {
  Fail(StatusCode::kUnsupported, ctx.node.Describe(), ": ", what..., " is not supported by the CUDA backend");
}

/// Throws kUnsupported unless input i's dtype is one of `allowed`.
inline void RequireDType(const PrepareContext& ctx, int i, std::initializer_list<DType> allowed) {
  const DType dt = ctx.in(i).dtype;
  for (DType a : allowed)
    if (a == dt) return;
  Unsupported(ctx, std::string("dtype ") + DTypeName(dt) + " of input " + std::to_string(i));
}

class CudaKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) final;

 protected:
  /// After shape inference set the outputs (ctx.outputs, ctx.alias, ctx.params):
  /// check what this kernel supports, set ctx.scratch_bytes (device).
  virtual void PrepareDevice(PrepareContext& ctx) = 0;
};

// Registration, one function per file group (called by CudaKernels()).
void RegisterElementwiseKernels(KernelRegistry& r);  // elementwise*.cu
void RegisterTensorKernels(KernelRegistry& r);       // tensor*.cu, resize.cu
void RegisterConvKernels(KernelRegistry& r);         // conv*.cu, pool*.cu, norm*.cu
void RegisterLinalgKernels(KernelRegistry& r);       // gemm*.cu, rnn*.cu, einsum.cu
void RegisterQuantKernels(KernelRegistry& r);        // quant_linear.cu: Q, DQ, QLookup, and
void RegisterQuantFusedKernel(KernelRegistry& r);    // quant_fused.cu: QLinearFused

}  // namespace cuda
}  // namespace kaiwu
