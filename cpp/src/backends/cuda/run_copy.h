// A run's device-to-device feed and result copies as one kernel that reads its
// source and destination pointers from mapped page-locked memory, so that a
// CUDA graph can record it with the run's other launches: the pointers change
// every run (the caller's tensors, a new result block), the recorded launch
// does not.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kaiwu {
namespace cuda {

struct FlatCopy {
  void* dst;
  const void* src;
  int64_t bytes;
};

/// Copies one table holds (more fall back to one cudaMemcpyAsync each).
constexpr int kMaxRunCopies = 32;

struct RunCopyTable {
  FlatCopy jobs[kMaxRunCopies];
};

/// Blocks per copy for the largest one of `max_bytes` (the launch's grid.x).
unsigned RunCopyBlocks(int64_t max_bytes);

/// Copies table->jobs[0 .. n) (`table`: a device address of mapped memory) with
/// `blocks` blocks per copy, 16 bytes per thread and step where aligned.
void LaunchRunCopies(const RunCopyTable* table, int n, unsigned blocks, cudaStream_t stream);

}  // namespace cuda
}  // namespace kaiwu
