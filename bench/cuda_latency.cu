// The device's floor for small kernels: SM clock (clock64 against CUDA events), dependent
// load latency (L1 hit, L2, a 1 GB chase), __syncthreads cost, back-to-back empty launches.
//   nvcc -O3 -arch=sm_90 bench/cuda_latency.cu -o /tmp/cuda_latency && /tmp/cuda_latency
#include <cstdio>
#include <cstdint>
#include <vector>
#include <cuda_runtime.h>
__global__ void Spin(long long cycles, long long* out) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
  if (threadIdx.x == 0) *out = clock64() - t0;
}
__global__ void Chase(const unsigned* __restrict__ next, int steps, unsigned* sink, long long* cyc, int cg) {
  unsigned i = 0;
  long long t0 = clock64();
  for (int s = 0; s < steps; ++s) i = cg ? __ldcg(next + i) : __ldg(next + i);
  long long t1 = clock64();
  *sink = i;
  *cyc = t1 - t0;
}
__global__ void Syncs(int n, long long* cyc) {
  long long t0 = clock64();
  for (int s = 0; s < n; ++s) __syncthreads();
  if (threadIdx.x == 0) *cyc = clock64() - t0;
}
__global__ void Empty() {}
int main() {
  long long *dc; unsigned* sink; cudaMalloc(&dc, 8); cudaMalloc(&sink, 4);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  Spin<<<1, 32>>>(1000, dc); cudaDeviceSynchronize();
  for (long long cyc : {2000000LL, 20000000LL}) {
    cudaEventRecord(a); Spin<<<1, 32>>>(cyc, dc); cudaEventRecord(b); cudaEventSynchronize(b);
    float ms; cudaEventElapsedTime(&ms, a, b);
    printf("spin %lld cycles: %.3f ms -> SM clock %.0f MHz\n", cyc, ms, cyc / (ms * 1e3));
  }
  for (size_t bytes : {size_t(16) << 10, size_t(8) << 20, size_t(1) << 30}) {
    size_t n = bytes / 4;
    std::vector<unsigned> h(n);
    // random cycle with stride >= 128 bytes
    size_t lines = n / 32;
    std::vector<unsigned> perm(lines);
    for (size_t i = 0; i < lines; ++i) perm[i] = i;
    unsigned long long r = 88172645463325252ULL;
    for (size_t i = lines - 1; i > 0; --i) { r ^= r << 13; r ^= r >> 7; r ^= r << 17; size_t j = r % (i + 1); std::swap(perm[i], perm[j]); }
    for (size_t i = 0; i < lines; ++i) h[perm[i] * 32] = perm[(i + 1) % lines] * 32;
    unsigned* d; cudaMalloc(&d, bytes); cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice);
    for (int cg : {0, 1}) {
      Chase<<<1, 1>>>(d, 2000, sink, dc, cg); cudaDeviceSynchronize();
      Chase<<<1, 1>>>(d, 2000, sink, dc, cg); cudaDeviceSynchronize();
      long long c; cudaMemcpy(&c, dc, 8, cudaMemcpyDeviceToHost);
      printf("chase %zu KB %s: %.0f cycles per load\n", bytes >> 10, cg ? "ld.cg" : "ldg", c / 2000.0);
    }
    cudaFree(d);
  }
  for (int threads : {256, 512}) {
    Syncs<<<1, threads>>>(1000, dc); cudaDeviceSynchronize();
    long long c; cudaMemcpy(&c, dc, 8, cudaMemcpyDeviceToHost);
    printf("__syncthreads x1000 at %d threads: %.1f cycles each\n", threads, c / 1000.0);
  }
  cudaEventRecord(a); for (int i = 0; i < 100; ++i) Empty<<<1, 32>>>(); cudaEventRecord(b); cudaEventSynchronize(b);
  float ms; cudaEventElapsedTime(&ms, a, b); printf("empty kernel back to back: %.2f us each\n", ms * 10);
  return 0;
}
