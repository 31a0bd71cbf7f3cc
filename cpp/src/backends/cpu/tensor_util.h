// Helpers shared by the shape and data-movement kernels (tensor_*.cc). These
// ops move bytes, so everything here works on element sizes, not types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/kernel.h"

namespace kaiwu {
namespace cpu {

// Registration, one function per file; RegisterTensorKernels calls them all.
void RegisterTensorViewKernels(KernelRegistry& r);       // tensor_view.cc
void RegisterTensorTransposeKernels(KernelRegistry& r);  // tensor_transpose.cc
void RegisterTensorExpandKernels(KernelRegistry& r);     // tensor_expand.cc
void RegisterTensorConcatKernels(KernelRegistry& r);     // tensor_concat.cc
void RegisterTensorSliceKernels(KernelRegistry& r);      // tensor_slice.cc
void RegisterTensorGatherKernels(KernelRegistry& r);     // tensor_gather.cc
void RegisterTensorPadKernels(KernelRegistry& r);        // tensor_pad.cc

/// Most dimensions a strided copy handles after merging (Tile doubles the rank).
constexpr int kMaxCopyDims = 64;

/// Copies `bytes` bytes, split across the pool when large.
void ParallelCopy(void* dst, const void* src, size_t bytes, ThreadPool* pool);

/// Fills `count` elements of `elem` bytes each with the element at `value`.
void FillElements(void* dst, const void* value, int64_t count, size_t elem);

/// Copies `count` elements of `elem` bytes from src (stride `stride` elements,
/// possibly 0 or negative) to contiguous dst.
void CopyStridedRow(void* dst, const void* src, int64_t count, int64_t stride, size_t elem);

/// out[i0..ik] = in[offset + sum_d i_d * strides[d]] for a row-major output:
/// covers Transpose (permuted strides), Slice (scaled strides, offset),
/// Expand (zero strides) and Tile (interleaved zero-stride dims). Init merges
/// dimensions that are contiguous in both tensors; Run picks memcpy, fill,
/// strided-gather or blocked-transpose inner loops and splits rows over the pool.
class StridedCopy {
 public:
  void Init(const PrepareContext& ctx, const Shape& out_shape,
            const std::vector<int64_t>& in_strides, int64_t in_offset, size_t elem);
  void Run(const void* src, void* dst, ThreadPool* pool) const;

 private:
  void RunRows(const char* src, char* dst, int64_t begin, int64_t end) const;
  void RunTransposed(const char* src, char* dst, ThreadPool* pool) const;

  std::vector<int64_t> shape_;    // merged output dims, at least one
  std::vector<int64_t> strides_;  // input stride (elements) per merged dim
  int64_t offset_ = 0;
  int64_t total_ = 0;
  size_t elem_ = 4;
};

}  // namespace cpu
}  // namespace kaiwu
