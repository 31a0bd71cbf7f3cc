// Device-side helpers shared by the CUDA kernels: fused activations, the
// error flag, grid-stride loops. Included only by .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/fused_activation.h"

namespace kaiwu {
namespace cuda {

/// A fused activation of Conv, Gemm or MatMul (ops/fused_activation.h), by value for kernels.
struct DeviceActivation {
  int kind = 0;  // FusedActivation::Kind as int
  float alpha = 0.f, beta = 0.f;

  static DeviceActivation From(const FusedActivation& a) {
    return DeviceActivation{static_cast<int>(a.kind), a.alpha, a.beta};
  }
  __host__ __device__ bool active() const { return kind != 0; }
  __device__ float operator()(float v) const {
    using K = FusedActivation::Kind;
    switch (static_cast<K>(kind)) {
      case K::kNone: return v;
      case K::kRelu: return v > 0.f ? v : 0.f;
      case K::kLeakyRelu: return v >= 0.f ? v : v * alpha;
      case K::kTanh: return tanhf(v);
      case K::kSigmoid: return 1.f / (1.f + expf(-v));
      case K::kClip: return fminf(fmaxf(v, alpha), beta);
      case K::kHardSigmoid: return fminf(fmaxf(v * alpha + beta, 0.f), 1.f);
      case K::kHardSwish: return v * fminf(fmaxf(v * (1.f / 6.f) + 0.5f, 0.f), 1.f);
    }
    return v;
  }
};

/// Records that the step `step` found bad data (first report wins).
__device__ inline void ReportError(int* flag, int step) {
  if (flag) atomicCAS(flag, 0, step + 1);
}

/// Operators of the float reductions below.
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
/// fmaxf: a NaN operand loses, as in the CPU kernels' std::max(acc, v).
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

/// Combines `v` over `threads` threads with `op` (32: one warp, no shared
/// memory; more: the whole block, threads == blockDim.x, all calling); every
/// one of them gets the result. `partial` is shared memory for threads / 32
/// values; calling again with the same `partial` is safe.
template <typename T, typename Op>
__device__ inline T CombineAcrossThreads(T v, Op op, T* partial, int threads) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threads <= 32) return v;
  __syncthreads();  // a previous call's readers are done with `partial`
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  v = partial[0];
  for (int w = 1; w < threads / 32; ++w) v = op(v, partial[w]);
  return v;
}

/// for (i = global thread; i < n; i += grid stride)
#define KAIWU_CUDA_LOOP(i, n)                                                          \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

}  // namespace cuda
}  // namespace kaiwu
