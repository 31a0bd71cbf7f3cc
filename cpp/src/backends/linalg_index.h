// Host-side index math of the linear-algebra and normalisation kernels, shared
// by the CPU kernels (cpu/matmul_kernel.cc, cpu/norm_layer.cc) and the CUDA
// kernels (cuda/gemm.cu, cuda/norm.cu).
#pragma once

#include <cstdint>
#include <vector>

#include "kaiwu/tensor.h"

namespace kaiwu {

/// Row-major broadcast strides of `shape` against the right-aligned `out` shape:
/// 0 where shape has 1 (or lacks the dim), the usual stride otherwise.
std::vector<int64_t> BroadcastStrides(const Shape& shape, const Shape& out);

/// For each index i of the broadcast batch `batch` (row-major), the element
/// offsets of the A and B matrices (a_mat and b_mat elements each) that a
/// batched product reads when A's batch dims `a_batch` and B's `b_batch`
/// broadcast to `batch` (MatMul).
void BatchMatrixOffsets(const Shape& a_batch, const Shape& b_batch, const Shape& batch,
                        int64_t a_mat, int64_t b_mat, std::vector<int64_t>* a_off,
                        std::vector<int64_t>* b_off);

}  // namespace kaiwu
