// Shared pieces of the CUDA data-movement and reduction kernels (tensor*.cu):
// per-file registration, element-size dispatch, fixed-size dim arrays passed
// to kernels by value, and the device strided copy behind Transpose, Slice,
// Expand and Tile. Data movement works on element sizes, never on dtypes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_util.cuh"

namespace kaiwu {
namespace cuda {
namespace tensor {

// Registration, one function per file; cuda::RegisterTensorKernels (tensor_util.cu)
// calls them all.
void RegisterTensorViewKernels(KernelRegistry& r);     // tensor_view.cu
void RegisterTensorStridedKernels(KernelRegistry& r);  // tensor_strided.cu
void RegisterTensorConcatKernels(KernelRegistry& r);   // tensor_concat.cu
void RegisterTensorPadKernels(KernelRegistry& r);      // tensor_pad.cu
void RegisterTensorGatherKernels(KernelRegistry& r);   // tensor_gather.cu
void RegisterTensorScatterKernels(KernelRegistry& r);  // tensor_scatter.cu
void RegisterTensorScanKernels(KernelRegistry& r);     // tensor_scan.cu
void RegisterTensorReduceKernels(KernelRegistry& r);   // tensor_reduce.cu
void RegisterResizeKernel(KernelRegistry& r);          // resize.cu

/// Most dimensions a kernel's index arithmetic handles (after merging).
constexpr int kMaxDims = 16;

/// Up to kMaxDims sizes and strides, by value for kernels.
template <typename Index>
struct DimArray {
  int n = 0;
  Index size[kMaxDims];
  Index stride[kMaxDims];
};

/// Fills a DimArray from sizes and strides (at most kMaxDims of them).
template <typename Index>
DimArray<Index> MakeDims(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  DimArray<Index> d;
  d.n = static_cast<int>(sizes.size());
  for (int i = 0; i < d.n; ++i) {
    d.size[i] = static_cast<Index>(sizes[i]);
    d.stride[i] = static_cast<Index>(strides[i]);
  }
  return d;
}

/// sum_d coord_d * stride[d], where coord is `linear` unravelled row-major over size[].
template <typename Index>
__device__ inline Index DimOffset(const DimArray<Index>& d, Index linear) {
  Index off = 0;
  for (int k = d.n - 1; k >= 0; --k) {
    Index q = linear / d.size[k];
    off += (linear - q * d.size[k]) * d.stride[k];
    linear = q;
  }
  return off;
}

/// Index `v` (negative counts from the end) wrapped into [0, dim), or -1 when out of range.
__device__ inline int64_t WrapIndex(int64_t v, int64_t dim) {
  if (v < -dim || v >= dim) return -1;
  return v < 0 ? v + dim : v;
}

/// Adds sum_m WrapIndex(idx[m], indexed.size[m]) * indexed.stride[m] to *off for
/// one index tuple of indexed.n entries (GatherND, ScatterND); false when an
/// index is out of range.
template <typename I>
__device__ inline bool AddTupleOffset(const I* idx, const DimArray<int64_t>& indexed,
                                      int64_t* off) {
  bool ok = true;
  for (int m = 0; m < indexed.n; ++m) {
    const int64_t k = WrapIndex(static_cast<int64_t>(idx[m]), indexed.size[m]);
    ok = ok && k >= 0;
    *off += k * indexed.stride[m];
  }
  return ok;
}

/// Runs BODY with `using U = <unsigned type of ELEM bytes>` (1, 2, 4 or 8).
#define KAIWU_CUDA_BY_ELEM(elem, ...)                                                  \
  switch (elem) {                                                                      \
    case 1: { using U = uint8_t; __VA_ARGS__; break; }                                 \
    case 2: { using U = uint16_t; __VA_ARGS__; break; }                                \
    case 4: { using U = uint32_t; __VA_ARGS__; break; }                                \
    case 8: { using U = uint64_t; __VA_ARGS__; break; }                                \
    default:                                                                           \
      ::kaiwu::Fail(::kaiwu::StatusCode::kInternal, "unexpected element size ", elem); \
  }

/// Device copy of `bytes` bytes on the stream, skipped when dst == src.
void CopyAsync(void* dst, const void* src, size_t bytes, cudaStream_t stream, const char* what);

/// out[i0..ik] = in[offset + sum_d i_d * strides[d]] for a row-major output, as
/// cpu::StridedCopy: Transpose (permuted strides), Slice (scaled strides,
/// offset), Expand (zero strides), Tile (interleaved zero-stride dims). Init
/// merges dims contiguous in both tensors; Run uses a tiled shared-memory
/// transpose when the input's contiguous dim is not the output's last, else a
/// per-element gather on the widest element the layout and pointers allow.
class StridedCopy {
 public:
  void Init(const PrepareContext& ctx, const Shape& out_shape,
            const std::vector<int64_t>& in_strides, int64_t in_offset, size_t elem);
  void Run(const void* src, void* dst, cudaStream_t stream) const;

 private:
  std::vector<int64_t> shape_;    // merged output dims, at least one
  std::vector<int64_t> strides_;  // input stride (elements) per merged dim
  int64_t offset_ = 0;
  int64_t total_ = 0;
  int64_t max_offset_ = 0;        // largest input element offset read
  size_t elem_ = 4;
};

}  // namespace tensor
}  // namespace cuda
}  // namespace kaiwu
