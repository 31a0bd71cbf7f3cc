#include "backends/cuda/run_copy.h"

#include <vector>

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

__global__ void RunCopyKernel(const __grid_constant__ RunCopyTable table, int dir) {
  (void)dir;  // names the node (FindRunCopyNodes)
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

void LaunchRunCopies(const RunCopyTable& table, int dir, int n, unsigned blocks, cudaStream_t stream) {
  if (n <= 0) return;
  RunCopyKernel<<<dim3(blocks, static_cast<unsigned>(n)), kBlock, 0, stream>>>(table, dir);
  CheckLaunch("feed/result copy kernel");
}

void LaunchRunCopiesMapped(const RunCopyTable* table, int n, unsigned blocks, cudaStream_t stream) {
  if (n <= 0) return;
  RunCopyKernelMapped<<<dim3(blocks, static_cast<unsigned>(n)), kBlock, 0, stream>>>(table);
  CheckLaunch("feed/result copy kernel");
}

cudaError_t FindRunCopyNodes(cudaGraph_t graph, cudaGraphNode_t (&nodes)[2]) {
  nodes[0] = nodes[1] = nullptr;
  size_t count = 0;
  cudaError_t err = cudaGraphGetNodes(graph, nullptr, &count);
  if (err != cudaSuccess || count == 0) return err;
  std::vector<cudaGraphNode_t> all(count);
  err = cudaGraphGetNodes(graph, all.data(), &count);
  if (err != cudaSuccess) return err;
  for (cudaGraphNode_t node : all) {
    cudaGraphNodeType type;
    err = cudaGraphNodeGetType(node, &type);
    if (err != cudaSuccess) return err;
    if (type != cudaGraphNodeTypeKernel) continue;
    cudaKernelNodeParams p{};
    err = cudaGraphKernelNodeGetParams(node, &p);
    if (err != cudaSuccess) return err;
    if (p.func != reinterpret_cast<void*>(&RunCopyKernel)) continue;
    const int dir = *static_cast<const int*>(p.kernelParams[1]);
    if (dir == 0 || dir == 1) nodes[dir] = node;
  }
  return cudaSuccess;
}

cudaError_t SetRunCopies(cudaGraphExec_t exec, cudaGraphNode_t node, const RunCopyTable& table, int dir,
                         int n, unsigned blocks) {
  void* args[2] = {const_cast<RunCopyTable*>(&table), &dir};
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
