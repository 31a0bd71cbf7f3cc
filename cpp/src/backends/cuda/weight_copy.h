// Device-side writes of a weight refit: many element copies (weights from a
// caller's CUDA tensors, LSTM/GRU gates repacked, matrices transposed) in one
// launch, with the NaN/Inf check of `check_finite` fused in. Up to
// kMaxParamJobs jobs travel in the launch's own parameters (no copy of a job
// table queued before it); more are read from a table in device memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kaiwu {
namespace cuda {

/// One copy: rows x cols elements to `dst` (contiguous) from `src` at element
/// src_offset + r * row_stride + c * col_stride (DeviceCopyJob, on the device).
struct CopyJob {
  void* dst;
  const void* src;
  int64_t src_offset, rows, cols, row_stride, col_stride;
  int32_t elem_size;  // 1, 2, 4 or 8
  int32_t check;      // float size to check for NaN/Inf (2, 4, 8), or 0
  int32_t tag;
  int32_t pad;
};

/// Elements one block of threads copies.
constexpr int64_t kCopyChunk = 8192;

/// Runs `num_jobs` jobs (device array) on `stream`: job j takes blocks
/// first_block[j] .. first_block[j + 1] - 1 (device array of num_jobs + 1). A
/// checked job that reads NaN/Inf lowers *fault to (tag << 40) | source index.
void LaunchCopyJobs(const CopyJob* jobs, const int64_t* first_block, int num_jobs,
                    int64_t num_blocks, unsigned long long* fault, cudaStream_t stream);

/// Elements one block copies in LaunchCopyJobsByValue: more blocks for small
/// weights, each thread with four 16-byte moves in flight.
constexpr int64_t kCopyChunkByValue = 4096;

/// The most jobs LaunchCopyJobsByValue takes (its parameters stay under the
/// 32 KB that CUDA 12.1+ allows a launch on Volta and later).
constexpr int kMaxParamJobs = 384;

/// The same from host memory, job j taking kCopyChunkByValue elements a
/// block: `jobs` and `first_block` (num_jobs + 1) are
/// copied into the launch's parameters (num_jobs <= kMaxParamJobs), so the
/// host arrays may be reused once this returns.
void LaunchCopyJobsByValue(const CopyJob* jobs, const int64_t* first_block, int num_jobs,
                           int64_t num_blocks, unsigned long long* fault, cudaStream_t stream);

}  // namespace cuda
}  // namespace kaiwu
