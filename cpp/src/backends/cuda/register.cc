#include "backends/cuda/cuda_kernels.h"

namespace kaiwu {

const KernelRegistry& CudaKernels() {
  static const KernelRegistry registry = [] {
    KernelRegistry r;
    cuda::RegisterElementwiseKernels(r);
    cuda::RegisterTensorKernels(r);
    cuda::RegisterConvKernels(r);
    cuda::RegisterLinalgKernels(r);
    cuda::RegisterQuantKernels(r);
    return r;
  }();
  return registry;
}

std::vector<std::pair<OpId, std::string>> CudaKernelGaps() {
  // Ops the CUDA backend leaves to the CPU on purpose, each with the reason a
  // user reads in the coverage report. Ops the op layer evaluates at plan time
  // (Shape, Size, ConstantOfShape, Range) need no kernel on any backend.
  // The optimizer's fused integer node (QLinearFused, with QuantizeLinear,
  // DequantizeLinear and QLookup around it) runs on the device; the ONNX
  // integer ops it does not make have no device kernel.
  const std::string int8 =
      "CUDA runs QDQ models (the optimizer's fused int8 nodes); a model with this integer op "
      "runs with device='cpu'";
  return {{OpId::kPackedGemm,
           "CPU-only: the CPU prepack rewrite makes it; CUDA sessions keep Gemm/MatMul"},
          {OpId::kDynamicQuantizeLinear, int8}, {OpId::kMatMulInteger, int8},
          {OpId::kQLinearMatMul, int8},    {OpId::kConvInteger, int8},
          {OpId::kQLinearConv, int8},
          {OpId::kQPackWeights, "static: the weights are packed on the host at load and refit"},
          {OpId::kQLinearAdd,
           "CPU-only: the CPU int8 rewrite makes it; CUDA sessions keep DequantizeLinear -> Add -> "
           "QuantizeLinear"}};
}

namespace cuda {

void CheckCuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  StatusCode code = err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver
                        ? StatusCode::kUnsupported
                        : StatusCode::kRuntime;
  Fail(code, "CUDA: ", what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
}

void CheckBlas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  Fail(StatusCode::kRuntime, "cuBLAS: ", what, ": status ", static_cast<int>(status));
}

void CheckLaunch(const char* what) { CheckCuda(cudaGetLastError(), what); }

void CudaKernel::Prepare(PrepareContext& ctx) {
  ctx.scratch_bytes = 0;
  PrepareDevice(ctx);
}

}  // namespace cuda
}  // namespace kaiwu
