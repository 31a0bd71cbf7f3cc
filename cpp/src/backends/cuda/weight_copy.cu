#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/weight_copy.h"

namespace kaiwu {
namespace cuda {

namespace {

template <typename U> __device__ bool NonFinite(U bits, int check) {
  const unsigned long long b = static_cast<unsigned long long>(bits);
  switch (check) {
    case 2: return (b & 0x7c00ull) == 0x7c00ull;
    case 4: return (b & 0x7f800000ull) == 0x7f800000ull;
    case 8: return (b & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
    default: return false;
  }
}

template <typename U>
__device__ void CopyChunk(const CopyJob& j, int64_t begin, int64_t end, unsigned long long* fault) {
  U* dst = static_cast<U*>(j.dst);
  const U* src = static_cast<const U*>(j.src) + j.src_offset;
  const bool contiguous = j.col_stride == 1 && (j.rows == 1 || j.row_stride == j.cols);
  if (contiguous && !j.check) {
    // 16-byte moves where both sides allow it.
    const uintptr_t d = reinterpret_cast<uintptr_t>(dst + begin);
    const uintptr_t s = reinterpret_cast<uintptr_t>(src + begin);
    if (sizeof(U) < 16 && ((d | s) & 15) == 0) {
      constexpr int kPer = 16 / sizeof(U);
      const int64_t vecs = (end - begin) / kPer;
      uint4* dv = reinterpret_cast<uint4*>(dst + begin);
      const uint4* sv = reinterpret_cast<const uint4*>(src + begin);
      for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) dv[i] = sv[i];
      for (int64_t e = begin + vecs * kPer + threadIdx.x; e < end; e += blockDim.x) dst[e] = src[e];
      return;
    }
    for (int64_t e = begin + threadIdx.x; e < end; e += blockDim.x) dst[e] = src[e];
    return;
  }
  for (int64_t e = begin + threadIdx.x; e < end; e += blockDim.x) {
    int64_t at = e;
    if (!contiguous) {
      const int64_t r = e / j.cols, c = e - r * j.cols;
      at = r * j.row_stride + c * j.col_stride;
    }
    const U v = src[at];
    dst[e] = v;
    if (j.check && NonFinite(v, j.check))
      atomicMin(fault, (static_cast<unsigned long long>(j.tag) << 40) |
                           static_cast<unsigned long long>(j.src_offset + at));
  }
}

__global__ void CopyJobsKernel(const CopyJob* jobs, const int64_t* first_block, int num_jobs,
                               unsigned long long* fault) {
  const int64_t block = blockIdx.x;
  int lo = 0, hi = num_jobs - 1;  // the last job whose first block is <= this block
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first_block[mid] <= block) lo = mid;
    else hi = mid - 1;
  }
  const CopyJob& j = jobs[lo];
  const int64_t begin = (block - first_block[lo]) * kCopyChunk;
  const int64_t n = j.rows * j.cols;
  const int64_t end = begin + kCopyChunk < n ? begin + kCopyChunk : n;
  if (begin >= end) return;
  switch (j.elem_size) {
    case 1: CopyChunk<uint8_t>(j, begin, end, fault); break;
    case 2: CopyChunk<uint16_t>(j, begin, end, fault); break;
    case 4: CopyChunk<uint32_t>(j, begin, end, fault); break;
    case 8: CopyChunk<unsigned long long>(j, begin, end, fault); break;
  }
}

}  // namespace

void LaunchCopyJobs(const CopyJob* jobs, const int64_t* first_block, int num_jobs,
                    int64_t num_blocks, unsigned long long* fault, cudaStream_t stream) {
  if (num_jobs == 0 || num_blocks == 0) return;
  CopyJobsKernel<<<static_cast<unsigned>(num_blocks), kBlock, 0, stream>>>(jobs, first_block,
                                                                           num_jobs, fault);
  CheckLaunch("weight copy kernel");
}

}  // namespace cuda
}  // namespace kaiwu
