// Runs one CUDA kernel outside any plan, for tests that compare it with the
// CPU kernel of the same op on the same random inputs.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../kernel_harness.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/dnn.h"

namespace kaiwu {
namespace testing {

/// True when a CUDA device is usable; tests call GTEST_SKIP() otherwise.
inline bool CudaDeviceAvailable() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define KAIWU_REQUIRE_CUDA() \
  if (!::kaiwu::testing::CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device"

/// Prepares and runs the node's CUDA kernel on `inputs` (host tensors, copied
/// to the device; an undefined-dtype Tensor marks an omitted optional input).
/// As in a plan, input data is visible to Prepare only for `const_inputs`
/// (shape operands); weights and activations are not. Outputs are copied back.
inline std::vector<Tensor> RunNodeCuda(const Node& node, const std::vector<Tensor>& inputs,
                                       const std::vector<int>& const_inputs = {}) {
  PrepareContext ctx(node);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    TensorInfo info;
    info.present = t.dtype() != DType::kUndefined;
    info.dtype = t.dtype();
    info.shape = t.shape();
    bool known = false;
    for (int c : const_inputs) known = known || c == static_cast<int>(i);
    info.data = info.present && known ? t.data() : nullptr;
    ctx.inputs.push_back(info);
  }
  InferOp(ctx);
  std::unique_ptr<Kernel> kernel = PrepareKernel(CudaKernels(), "CUDA", ctx);

  std::vector<void*> owned;
  auto dev_alloc = [&](size_t bytes) {
    void* p = nullptr;
    cuda::CheckCuda(cudaMalloc(&p, bytes < 256 ? 256 : bytes), "cudaMalloc");
    owned.push_back(p);
    return p;
  };
  std::vector<const void*> in_ptrs;
  for (const Tensor& t : inputs) {
    if (t.dtype() == DType::kUndefined) {
      in_ptrs.push_back(nullptr);
      continue;
    }
    void* d = dev_alloc(t.bytes());
    cuda::CheckCuda(cudaMemcpy(d, t.data(), t.bytes(), cudaMemcpyHostToDevice), "copy in");
    in_ptrs.push_back(d);
  }
  std::vector<Tensor> outputs;
  std::vector<void*> out_ptrs;
  for (const TensorInfo& o : ctx.outputs) {
    outputs.emplace_back(o.present ? Tensor(o.dtype, o.shape) : Tensor());
    if (!o.present) {
      out_ptrs.push_back(nullptr);
      continue;
    }
    void* d = dev_alloc(outputs.back().bytes());
    // NaN-fill so that an unwritten element shows.
    cuda::CheckCuda(cudaMemset(d, 0xff, outputs.back().bytes() < 256 ? 256 : outputs.back().bytes()),
                    "memset");
    out_ptrs.push_back(d);
  }
  void* scratch = ctx.scratch_bytes ? dev_alloc(ctx.scratch_bytes) : nullptr;

  cuda::DeviceContext dc;
  cuda::CheckCuda(cudaStreamCreate(&dc.stream), "stream");
  cuda::CheckBlas(cublasCreate(&dc.blas), "cublasCreate");
  cuda::CheckBlas(cublasSetStream(dc.blas, dc.stream), "cublasSetStream");
  if (ctx.device_needs & kNeedDnnHandle) dc.dnn = cuda::CreateDnnHandle(dc.stream);
  dc.error_flag = static_cast<int*>(dev_alloc(sizeof(int)));
  cuda::CheckCuda(cudaMemset(dc.error_flag, 0, sizeof(int)), "memset");
  KernelIO io{in_ptrs.data(), out_ptrs.data(), scratch, nullptr, &dc};
  std::string error;
  try {
    kernel->Run(io);
    cuda::CheckCuda(cudaStreamSynchronize(dc.stream), "sync");
    int flag = 0;
    cuda::CheckCuda(cudaMemcpy(&flag, dc.error_flag, sizeof(int), cudaMemcpyDeviceToHost), "flag");
    if (flag) error = node.Describe() + ": the kernel reported bad data";
    for (size_t k = 0; k < outputs.size(); ++k)
      if (out_ptrs[k])
        cuda::CheckCuda(cudaMemcpy(outputs[k].data(), out_ptrs[k], outputs[k].bytes(),
                                   cudaMemcpyDeviceToHost),
                        "copy out");
  } catch (const Error& e) {
    error = e.what();
  }
  cublasDestroy(dc.blas);
  cuda::DestroyDnnHandle(dc.dnn);
  cudaStreamDestroy(dc.stream);
  for (void* p : owned) cudaFree(p);
  if (!error.empty()) throw Error(StatusCode::kRuntime, error);
  return outputs;
}

/// Expects RunNodeCuda(node, inputs) to throw kaiwu::Error with `code`.
inline void ExpectCudaError(const Node& node, const std::vector<Tensor>& inputs, StatusCode code,
                            const std::string& what) {
  ExpectError([&] { RunNodeCuda(node, inputs); }, code, what);
}

/// Element-wise |a - b| <= atol + rtol * |b| for float32 tensors of equal shape
/// (NaN only where the reference has NaN, infinities equal); exact equality for
/// other dtypes.
inline void ExpectTensorsClose(const Tensor& got, const Tensor& want, float rtol, float atol,
                               const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  if (want.dtype() != DType::kFloat32) {
    ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.bytes())) << what;
    return;
  }
  const float* g = got.As<float>();
  const float* w = want.As<float>();
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < want.size(); ++i) {
    bool ok = std::isnan(w[i]) ? std::isnan(g[i])
                               : g[i] == w[i] ||  // also equal infinities
                                     std::fabs(g[i] - w[i]) <= atol + rtol * std::fabs(w[i]);
    if (!ok && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want.size()
                    << " elements differ; first at " << first << ": got "
                    << (first >= 0 ? g[first] : 0.f) << ", want " << (first >= 0 ? w[first] : 0.f);
}

}  // namespace testing
}  // namespace kaiwu
