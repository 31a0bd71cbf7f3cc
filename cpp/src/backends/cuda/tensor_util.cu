// The device strided copy (see tensor_util.cuh), the D2D copy helper, and
// RegisterTensorKernels, which registers every tensor*.cu file's kernels.
#include <cstdint>

#include "backends/cuda/tensor_util.cuh"
#include "backends/copy_geometry.h"

namespace kaiwu {
namespace cuda {
namespace tensor {
namespace {

constexpr int kTile = 32;      // transpose tile edge, in elements
constexpr int kTileRows = 8;   // thread rows per transpose tile (each moves kTile / kTileRows)
constexpr unsigned kMaxGridDim = 65535;

// dst[i] = src[offset + DimOffset(dims, i)] for i in [0, total).
template <typename U, typename Index>
__global__ void StridedGatherGpu(const U* __restrict__ src, U* __restrict__ dst,
                                 DimArray<Index> dims, Index offset, Index total) {
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<Index>(blockDim.x) * gridDim.x)
    dst[i] = src[offset + DimOffset(dims, i)];
}

// Batched 2-D transpose: dst[o, a, b] = src[offset + DimOffset(outer_dims, o) + a + b * ld]
// for a < rows, b < cols. A block moves 32x32 tiles through shared memory so that
// both the reads (along a) and the writes (along b) are coalesced.
template <typename U, typename Index>
__global__ void TransposeTileGpu(const U* __restrict__ src, U* __restrict__ dst,
                                    DimArray<Index> outer_dims, Index offset, Index outer,
                                    Index rows, Index cols, Index ld) {
  __shared__ U tile[kTile][kTile + 1];  // +1: no bank conflicts on the transposed read
  const Index row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
  const Index tx = threadIdx.x;
  for (Index o = blockIdx.z; o < outer; o += gridDim.z) {
    const U* s = src + offset + DimOffset(outer_dims, o);
    U* d = dst + o * rows * cols;
    for (Index bt = blockIdx.y; bt < col_tiles; bt += gridDim.y) {
      for (Index at = blockIdx.x; at < row_tiles; at += gridDim.x) {
        const Index a0 = at * kTile, b0 = bt * kTile;
        for (Index j = threadIdx.y; j < kTile; j += kTileRows) {  // tile[b - b0][a - a0]
          const Index a = a0 + tx, b = b0 + j;
          if (a < rows && b < cols) tile[j][tx] = s[a + b * ld];
        }
        __syncthreads();
        for (Index j = threadIdx.y; j < kTile; j += kTileRows) {
          const Index a = a0 + j, b = b0 + tx;
          if (a < rows && b < cols) d[a * cols + b] = tile[tx][j];
        }
        __syncthreads();
      }
    }
  }
}

// A few planes moved innermost (NCHW -> NHWC of a 3- or 4-channel image):
// dst[o][p][c] = src[offset + o * outer_stride + c * P + p] for c < C. One
// thread per (o, p): its reads of each plane run along p with its neighbours',
// and it writes its C elements contiguously.
template <typename U, typename Index>
__global__ void PlanesInnermostGpu(const U* __restrict__ src, U* __restrict__ dst, Index offset,
                                   Index outer_stride, Index P, Index C, Index pixels) {
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < pixels;
       i += static_cast<Index>(blockDim.x) * gridDim.x) {
    const Index o = i / P, p = i - o * P;
    const U* s = src + offset + o * outer_stride + p;
    U* d = dst + i * C;
    for (Index c = 0; c < C; ++c) d[c] = s[c * P];
  }
}

// The same where a pixel's C elements are 8 or 16 bytes (V: uint2 or uint4,
// C = sizeof(V) / sizeof(U); dst aligned to V): one store a pixel, so a warp
// writes one contiguous run (NCHW -> NHWC of 8 half channels, where 32 x 32
// tiles would leave three quarters of each block idle).
template <typename U, typename V, typename Index>
__global__ void PlanesInnermostPackGpu(const U* __restrict__ src, V* __restrict__ dst, Index offset,
                                       Index outer_stride, Index P, Index pixels) {
  constexpr int C = sizeof(V) >= sizeof(U) ? static_cast<int>(sizeof(V) / sizeof(U)) : 1;  // 1: never launched
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < pixels;
       i += static_cast<Index>(blockDim.x) * gridDim.x) {
    const Index o = i / P, p = i - o * P;
    const U* s = src + offset + o * outer_stride + p;
    union {
      V v;
      U u[C];
    } pack;
#pragma unroll
    for (int c = 0; c < C; ++c) pack.u[c] = s[c * P];
    dst[i] = pack.v;
  }
}

template <typename U, typename V, typename Index>
void LaunchPlanesInnermostPack(const void* src, void* dst, int64_t offset, int64_t outer_stride, int64_t P,
                               int64_t pixels, cudaStream_t stream) {
  PlanesInnermostPackGpu<U, V, Index><<<GridFor(pixels), kBlock, 0, stream>>>(
      static_cast<const U*>(src), static_cast<V*>(dst), static_cast<Index>(offset),
      static_cast<Index>(outer_stride), static_cast<Index>(P), static_cast<Index>(pixels));
}

template <typename U, typename Index>
void LaunchPlanesInnermost(const void* src, void* dst, int64_t offset, int64_t outer_stride, int64_t P,
                           int64_t C, int64_t pixels, cudaStream_t stream) {
  PlanesInnermostGpu<U, Index><<<GridFor(pixels), kBlock, 0, stream>>>(
      static_cast<const U*>(src), static_cast<U*>(dst), static_cast<Index>(offset),
      static_cast<Index>(outer_stride), static_cast<Index>(P), static_cast<Index>(C),
      static_cast<Index>(pixels));
}

unsigned GridDimFor(int64_t tiles) {
  return static_cast<unsigned>(tiles < 1 ? 1 : (tiles > kMaxGridDim ? kMaxGridDim : tiles));
}

template <typename U, typename Index>
void LaunchTranspose(const void* src, void* dst, const std::vector<int64_t>& shape,
                     const std::vector<int64_t>& strides, int64_t offset, int64_t total,
                     cudaStream_t stream) {
  const int r = static_cast<int>(shape.size());
  const int64_t rows = shape[r - 2], cols = shape[r - 1];
  const int64_t outer = total / (rows * cols);
  DimArray<Index> outer_dims = MakeDims<Index>(
      std::vector<int64_t>(shape.begin(), shape.end() - 2),
      std::vector<int64_t>(strides.begin(), strides.end() - 2));
  dim3 grid(GridDimFor((rows + kTile - 1) / kTile), GridDimFor((cols + kTile - 1) / kTile),
            GridDimFor(outer));
  TransposeTileGpu<U, Index><<<grid, dim3(kTile, kTileRows), 0, stream>>>(
      static_cast<const U*>(src), static_cast<U*>(dst), outer_dims, static_cast<Index>(offset),
      static_cast<Index>(outer), static_cast<Index>(rows), static_cast<Index>(cols),
      static_cast<Index>(strides[r - 1]));
}

template <typename U, typename Index>
void LaunchGather(const void* src, void* dst, const std::vector<int64_t>& shape,
                  const std::vector<int64_t>& strides, int64_t offset, int64_t total,
                  cudaStream_t stream) {
  StridedGatherGpu<U, Index><<<GridFor(total), kBlock, 0, stream>>>(
      static_cast<const U*>(src), static_cast<U*>(dst), MakeDims<Index>(shape, strides),
      static_cast<Index>(offset), static_cast<Index>(total));
}

// Gather on `elem`-byte elements (1, 2, 4, 8 or 16).
template <typename Index>
void LaunchGatherElem(size_t elem, const void* src, void* dst, const std::vector<int64_t>& shape,
                      const std::vector<int64_t>& strides, int64_t offset, int64_t total,
                      cudaStream_t stream) {
  if (elem == 16) {
    LaunchGather<uint4, Index>(src, dst, shape, strides, offset, total, stream);
    return;
  }
  KAIWU_CUDA_BY_ELEM(elem, LaunchGather<U, Index>(src, dst, shape, strides, offset, total, stream));
}

bool Aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

}  // namespace

void CopyAsync(void* dst, const void* src, size_t bytes, cudaStream_t stream, const char* what) {
  if (bytes == 0 || dst == src) return;
  CheckCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), what);
}

void StridedCopy::Init(const PrepareContext& ctx, const Shape& out_shape,
                       const std::vector<int64_t>& in_strides, int64_t in_offset, size_t elem) {
  elem_ = elem;
  offset_ = in_offset;
  total_ = NumElements(out_shape);
  MergeCopyDims(out_shape, in_strides, &shape_, &strides_);
  if (static_cast<int>(shape_.size()) > kMaxDims)
    Unsupported(ctx, "a copy with ", shape_.size(), " non-contiguous dimensions (at most ",
                kMaxDims, ")");
  max_offset_ = offset_;
  for (size_t d = 0; d < shape_.size(); ++d)
    if (strides_[d] > 0) max_offset_ += (shape_[d] - 1) * strides_[d];
}

void StridedCopy::Run(const void* src, void* dst, cudaStream_t stream) const {
  if (total_ == 0) return;
  const int r = static_cast<int>(shape_.size());
  // 32-bit index arithmetic when every index fits (the grid stride stays below 2^30).
  const bool small = total_ <= (int64_t{1} << 30) && max_offset_ < (int64_t{1} << 31);
  // [outer,] P, C with strides [outer_stride,] 1, P: a pixel's C elements of 8
  // or 16 bytes as one store (PlanesInnermostPackGpu), else for C < 8 one at a time.
  const bool planes = (r == 2 || r == 3) && strides_[r - 2] == 1 && strides_[r - 1] == shape_[r - 2] &&
                      shape_[r - 1] > 1 && shape_[r - 2] > 1;
  const int64_t pixel_bytes = planes ? shape_[r - 1] * static_cast<int64_t>(elem_) : 0;
  if (planes && (pixel_bytes == 16 || pixel_bytes == 8) && Aligned(dst, static_cast<size_t>(pixel_bytes))) {
    const int64_t P = shape_[r - 2];
    const int64_t outer = r == 3 ? shape_[0] : 1, outer_stride = r == 3 ? strides_[0] : 0;
    if (pixel_bytes == 16) {
      if (small) {
        KAIWU_CUDA_BY_ELEM(elem_, (LaunchPlanesInnermostPack<U, uint4, int32_t>(src, dst, offset_, outer_stride, P,
                                                                                outer * P, stream)));
      } else {
        KAIWU_CUDA_BY_ELEM(elem_, (LaunchPlanesInnermostPack<U, uint4, int64_t>(src, dst, offset_, outer_stride, P,
                                                                                outer * P, stream)));
      }
    } else {
      if (small) {
        KAIWU_CUDA_BY_ELEM(elem_, (LaunchPlanesInnermostPack<U, uint2, int32_t>(src, dst, offset_, outer_stride, P,
                                                                                outer * P, stream)));
      } else {
        KAIWU_CUDA_BY_ELEM(elem_, (LaunchPlanesInnermostPack<U, uint2, int64_t>(src, dst, offset_, outer_stride, P,
                                                                                outer * P, stream)));
      }
    }
    CheckLaunch("transpose kernel");
    return;
  }
  if (planes && shape_[r - 1] < 8) {
    const int64_t P = shape_[r - 2], C = shape_[r - 1];
    const int64_t outer = r == 3 ? shape_[0] : 1, outer_stride = r == 3 ? strides_[0] : 0;
    if (small) {
      KAIWU_CUDA_BY_ELEM(elem_, LaunchPlanesInnermost<U, int32_t>(src, dst, offset_, outer_stride, P, C,
                                                                  outer * P, stream));
    } else {
      KAIWU_CUDA_BY_ELEM(elem_, LaunchPlanesInnermost<U, int64_t>(src, dst, offset_, outer_stride, P, C,
                                                                  outer * P, stream));
    }
    CheckLaunch("transpose kernel");
    return;
  }
  // Tiles pay when both transposed dims fill them; a few channels moved to the
  // end (NCHW -> NHWC of an image input) gather instead: 32x32 tiles would
  // leave most of each block idle.
  if (r >= 2 && strides_[r - 2] == 1 && strides_[r - 1] != 0 && strides_[r - 1] != 1 &&
      shape_[r - 1] >= 8 && shape_[r - 2] >= 8) {
    if (small) {
      KAIWU_CUDA_BY_ELEM(elem_, LaunchTranspose<U, int32_t>(src, dst, shape_, strides_, offset_,
                                                            total_, stream));
    } else {
      KAIWU_CUDA_BY_ELEM(elem_, LaunchTranspose<U, int64_t>(src, dst, shape_, strides_, offset_,
                                                            total_, stream));
    }
    CheckLaunch("transpose kernel");
    return;
  }
  // Widen the element when the inner dim is contiguous and every row start and
  // both pointers are aligned to the wider size: e.g. a Slice of whole rows
  // then moves 16 bytes per thread.
  std::vector<int64_t> shape = shape_, strides = strides_;
  int64_t offset = offset_, total = total_;
  size_t elem = elem_;
  if (strides_[r - 1] == 1) {
    for (size_t w = 16; w > elem_; w /= 2) {
      bool ok = (shape_[r - 1] * static_cast<int64_t>(elem_)) % static_cast<int64_t>(w) == 0 &&
                (offset_ * static_cast<int64_t>(elem_)) % static_cast<int64_t>(w) == 0 &&
                Aligned(src, w) && Aligned(dst, w);
      for (int d = 0; ok && d < r - 1; ++d)
        ok = (strides_[d] * static_cast<int64_t>(elem_)) % static_cast<int64_t>(w) == 0;
      if (!ok) continue;
      const int64_t f = static_cast<int64_t>(w / elem_);
      shape[r - 1] /= f;
      for (int d = 0; d < r - 1; ++d) strides[d] /= f;
      offset /= f;
      total /= f;
      elem = w;
      break;
    }
  }
  if (small) {
    LaunchGatherElem<int32_t>(elem, src, dst, shape, strides, offset, total, stream);
  } else {
    LaunchGatherElem<int64_t>(elem, src, dst, shape, strides, offset, total, stream);
  }
  CheckLaunch("strided copy kernel");
}

}  // namespace tensor

void RegisterTensorKernels(KernelRegistry& r) {
  tensor::RegisterTensorViewKernels(r);     // Reshape Flatten Squeeze Unsqueeze Identity Dropout
  tensor::RegisterTensorStridedKernels(r);  // Transpose Slice Expand Tile
  tensor::RegisterTensorConcatKernels(r);   // Concat Split
  tensor::RegisterTensorPadKernels(r);      // Pad
  tensor::RegisterTensorGatherKernels(r);   // Gather GatherElements GatherND OneHot
  tensor::RegisterTensorScatterKernels(r);  // ScatterElements ScatterND
  tensor::RegisterTensorScanKernels(r);     // CumSum TopK
  tensor::RegisterTensorReduceKernels(r);   // Reduce* ArgMax ArgMin
  tensor::RegisterResizeKernel(r);          // Resize
}

}  // namespace cuda
}  // namespace kaiwu
