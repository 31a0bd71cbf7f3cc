// Block-wide float reductions for kernels that run one block of kBlock threads
// per row or plane (the normalisations and the global pools).
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_util.cuh"

namespace kaiwu {
namespace cuda {

/// Combines every thread's `v` with `op`; all threads of the block (blockDim.x
/// == kBlock) must call it and all get the result. May be called repeatedly.
template <typename Op>
__device__ float BlockReduce(float v, Op op) {
  static_assert(kBlock % 32 == 0 && kBlock <= 1024, "whole warps");
  __shared__ float partial[kBlock / 32];
  return CombineAcrossThreads(v, op, partial, kBlock);
}

/// Blocks for one block per row over `rows` rows (the kernels loop past the grid).
inline unsigned RowGrid(int64_t rows) {
  return static_cast<unsigned>(rows < 1 ? 1 : (rows > (1 << 20) ? (1 << 20) : rows));
}

}  // namespace cuda
}  // namespace kaiwu
