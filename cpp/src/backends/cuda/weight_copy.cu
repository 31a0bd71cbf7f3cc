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

// kUnroll: 16-byte moves each thread has in flight at once (loads before stores).
template <typename U, int kUnroll>
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
      int64_t i = threadIdx.x;
      if (kUnroll > 1) {
        const int64_t step = blockDim.x;
        for (; i + (kUnroll - 1) * step < vecs; i += kUnroll * step) {
          uint4 v[kUnroll];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) v[u] = sv[i + u * step];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) dv[i + u * step] = v[u];
        }
      }
      for (; i < vecs; i += blockDim.x) dv[i] = sv[i];
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

// This block's share of the jobs: the last job whose first block is <= it
// (kChunk elements a block).
template <int64_t kChunk, int kUnroll>
__device__ void CopyBlockOfJobs(const CopyJob* jobs, const int64_t* first_block, int num_jobs,
                                unsigned long long* fault) {
  const int64_t block = blockIdx.x;
  int lo = 0, hi = num_jobs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first_block[mid] <= block) lo = mid;
    else hi = mid - 1;
  }
  const CopyJob& j = jobs[lo];
  const int64_t begin = (block - first_block[lo]) * kChunk;
  const int64_t n = j.rows * j.cols;
  const int64_t end = begin + kChunk < n ? begin + kChunk : n;
  if (begin >= end) return;
  switch (j.elem_size) {
    case 1: CopyChunk<uint8_t, kUnroll>(j, begin, end, fault); break;
    case 2: CopyChunk<uint16_t, kUnroll>(j, begin, end, fault); break;
    case 4: CopyChunk<uint32_t, kUnroll>(j, begin, end, fault); break;
    case 8: CopyChunk<unsigned long long, kUnroll>(j, begin, end, fault); break;
  }
}

__global__ void CopyJobsKernel(const CopyJob* jobs, const int64_t* first_block, int num_jobs,
                               unsigned long long* fault) {
  CopyBlockOfJobs<kCopyChunk, 1>(jobs, first_block, num_jobs, fault);
}

// Up to N jobs in the launch's parameters (read in place: __grid_constant__).
template <int N> struct JobTable {
  CopyJob jobs[N];
  int64_t first_block[N + 1];
};

template <int N>
__global__ void CopyJobsByValueKernel(const __grid_constant__ JobTable<N> t, int num_jobs,
                                      unsigned long long* fault) {
  CopyBlockOfJobs<kCopyChunkByValue, 4>(t.jobs, t.first_block, num_jobs, fault);
}

template <int N>
void LaunchByValue(const CopyJob* jobs, const int64_t* first_block, int num_jobs, int64_t num_blocks,
                   unsigned long long* fault, cudaStream_t stream) {
  static_assert(sizeof(JobTable<N>) + 16 <= 32764, "kernel parameters over 32 KB");
  JobTable<N> t;
  for (int i = 0; i < num_jobs; ++i) t.jobs[i] = jobs[i];
  for (int i = 0; i <= num_jobs; ++i) t.first_block[i] = first_block[i];
  CopyJobsByValueKernel<N><<<static_cast<unsigned>(num_blocks), kBlock, 0, stream>>>(t, num_jobs, fault);
}

}  // namespace

void LaunchCopyJobsByValue(const CopyJob* jobs, const int64_t* first_block, int num_jobs,
                           int64_t num_blocks, unsigned long long* fault, cudaStream_t stream) {
  if (num_jobs == 0 || num_blocks == 0) return;
  if (num_jobs > kMaxParamJobs) Fail(StatusCode::kInternal, "weight copy: ", num_jobs, " jobs by value");
  // The smallest table that holds them: a launch's parameters are copied
  // whole, so a few jobs do not pay for 30 KB.
  if (num_jobs <= 24) LaunchByValue<24>(jobs, first_block, num_jobs, num_blocks, fault, stream);
  else if (num_jobs <= 96) LaunchByValue<96>(jobs, first_block, num_jobs, num_blocks, fault, stream);
  else LaunchByValue<kMaxParamJobs>(jobs, first_block, num_jobs, num_blocks, fault, stream);
  CheckLaunch("weight copy kernel");
}

void LaunchCopyJobs(const CopyJob* jobs, const int64_t* first_block, int num_jobs,
                    int64_t num_blocks, unsigned long long* fault, cudaStream_t stream) {
  if (num_jobs == 0 || num_blocks == 0) return;
  CopyJobsKernel<<<static_cast<unsigned>(num_blocks), kBlock, 0, stream>>>(jobs, first_block,
                                                                           num_jobs, fault);
  CheckLaunch("weight copy kernel");
}

}  // namespace cuda
}  // namespace kaiwu
