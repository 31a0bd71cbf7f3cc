#include "backends/cuda/run_copy.h"

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_util.cuh"

namespace kaiwu {
namespace cuda {
namespace {

constexpr int kRunCopyUnroll = 4;

__device__ __forceinline__ void CopyJob(const FlatCopy& job) {
  if (job.bytes <= 0) return;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const uintptr_t d = reinterpret_cast<uintptr_t>(job.dst), s = reinterpret_cast<uintptr_t>(job.src);
  if (((d | s) & 15) == 0) {
    const int64_t vecs = job.bytes / 16;
    uint4* dv = static_cast<uint4*>(job.dst);
    const uint4* sv = static_cast<const uint4*>(job.src);
    // kRunCopyUnroll loads in flight per thread before any store: one memory
    // latency per kRunCopyUnroll vectors, not one each.
    int64_t i = start;
    for (; i + (kRunCopyUnroll - 1) * step < vecs; i += kRunCopyUnroll * step) {
      uint4 v[kRunCopyUnroll];
#pragma unroll
      for (int u = 0; u < kRunCopyUnroll; ++u) v[u] = __ldg(sv + i + u * step);
#pragma unroll
      for (int u = 0; u < kRunCopyUnroll; ++u) dv[i + u * step] = v[u];
    }
    for (; i < vecs; i += step) dv[i] = sv[i];
    char* db = static_cast<char*>(job.dst);
    const char* sb = static_cast<const char*>(job.src);
    for (int64_t i = vecs * 16 + start; i < job.bytes; i += step) db[i] = sb[i];
  } else {
    char* db = static_cast<char*>(job.dst);
    const char* sb = static_cast<const char*>(job.src);
    for (int64_t i = start; i < job.bytes; i += step) db[i] = sb[i];
  }
}

__global__ void RunCopyKernel(const __grid_constant__ RunCopyTable table) {
  CopyJob(table.jobs[blockIdx.y]);
}

__global__ void RunCopyKernelMapped(const RunCopyTable* __restrict__ table) {
  __shared__ FlatCopy job;
  if (threadIdx.x == 0) job = table->jobs[blockIdx.y];  // one read over PCIe per block
  __syncthreads();
  CopyJob(job);
}

}  // namespace

unsigned RunCopyBlocks(int64_t max_bytes) {
  const int64_t per_block = int64_t{kBlock} * 16 * kRunCopyUnroll;  // one unrolled step a thread
  const int64_t b = (max_bytes + per_block - 1) / per_block;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 1024 ? 1024 : b));
}

void LaunchRunCopies(const RunCopyTable& table, int n, unsigned blocks, cudaStream_t stream) {
  if (n <= 0) return;
  RunCopyKernel<<<dim3(blocks, static_cast<unsigned>(n)), kBlock, 0, stream>>>(table);
  CheckLaunch("feed/result copy kernel");
}

void LaunchRunCopiesMapped(const RunCopyTable* table, int n, unsigned blocks, cudaStream_t stream) {
  if (n <= 0) return;
  RunCopyKernelMapped<<<dim3(blocks, static_cast<unsigned>(n)), kBlock, 0, stream>>>(table);
  CheckLaunch("feed/result copy kernel");
}

cudaError_t LastCapturedNode(cudaStream_t stream, cudaGraphNode_t* node) {
  *node = nullptr;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* deps = nullptr;
  size_t n = 0;
#if CUDART_VERSION >= 13000
  const cudaError_t err = cudaStreamGetCaptureInfo(stream, &status, nullptr, nullptr, &deps, nullptr, &n);
#else
  const cudaError_t err = cudaStreamGetCaptureInfo(stream, &status, nullptr, nullptr, &deps, &n);
#endif
  // A stream's capture is a chain: the next launch would depend on this one node.
  if (err == cudaSuccess && status == cudaStreamCaptureStatusActive && n == 1) *node = deps[0];
  return err;
}

cudaError_t SetRunCopies(cudaGraphExec_t exec, cudaGraphNode_t node, const RunCopyTable& table, int n,
                         unsigned blocks) {
  void* args[1] = {const_cast<RunCopyTable*>(&table)};
  cudaKernelNodeParams p{};
  p.func = reinterpret_cast<void*>(&RunCopyKernel);
  p.gridDim = dim3(blocks, static_cast<unsigned>(n));
  p.blockDim = dim3(kBlock);
  p.sharedMemBytes = 0;
  p.kernelParams = args;
  p.extra = nullptr;
  return cudaGraphExecKernelNodeSetParams(exec, node, &p);
}

}  // namespace cuda
}  // namespace kaiwu
