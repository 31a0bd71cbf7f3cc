// Block-wide float reductions for kernels that run one block of kBlock threads
// per row or plane (the normalisations and the global pools).
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/cuda_kernels.h"

namespace kaiwu {
namespace cuda {

struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

/// fmaxf: a NaN operand loses, as in the CPU pools' std::max(acc, v).
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

/// Combines every thread's `v` with `op`; all threads of the block (blockDim.x
/// == kBlock) must call it and all get the result. May be called repeatedly.
template <typename Op>
__device__ float BlockReduce(float v, Op op) {
  static_assert(kBlock % 32 == 0 && kBlock <= 1024, "whole warps");
  __shared__ float partial[kBlock / 32];
  for (int offset = 16; offset > 0; offset >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  __syncthreads();  // a previous call's readers are done with `partial`
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  v = partial[0];
  for (int w = 1; w < kBlock / 32; ++w) v = op(v, partial[w]);
  return v;
}

/// Blocks for one block per row over `rows` rows (the kernels loop past the grid).
inline unsigned RowGrid(int64_t rows) {
  return static_cast<unsigned>(rows < 1 ? 1 : (rows > (1 << 20) ? (1 << 20) : rows));
}

}  // namespace cuda
}  // namespace kaiwu
