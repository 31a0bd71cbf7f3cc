// A run's device-to-device feed and result copies as one kernel, so that a
// CUDA graph can record it with the run's other launches. The pointers change
// every run (the caller's tensors, a new result block) while the recorded
// launch does not: the copy table travels in the kernel's parameters, and a
// replay sets the recorded node's parameters to this run's table
// (cudaGraphExecKernelNodeSetParams) where it differs from the last one.
// KAIWU_RUN_COPY_MAPPED=1 keeps the earlier form for A/B runs: each block reads
// its job from a table in mapped page-locked memory (one PCIe read a block).
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

/// Copies table.jobs[0 .. n) with `blocks` blocks per copy, 16 bytes per
/// thread and step where aligned; the table is a launch parameter.
void LaunchRunCopies(const RunCopyTable& table, int n, unsigned blocks, cudaStream_t stream);

/// The same, reading the table from `table` (a device address of mapped memory).
void LaunchRunCopiesMapped(const RunCopyTable* table, int n, unsigned blocks, cudaStream_t stream);

/// The node that the last launch on capturing `stream` added (LaunchRunCopies
/// while recording), or null.
cudaError_t LastCapturedNode(cudaStream_t stream, cudaGraphNode_t* node);

/// Sets a recorded copy node of `exec` to copy table.jobs[0 .. n) (n and blocks as recorded).
cudaError_t SetRunCopies(cudaGraphExec_t exec, cudaGraphNode_t node, const RunCopyTable& table, int n,
                         unsigned blocks);

}  // namespace cuda
}  // namespace kaiwu
