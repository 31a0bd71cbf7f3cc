// What programmatic dependent launch (PDL) saves between small dependent kernels in a
// CUDA graph: a chain of N elementwise kernels (each reads what the one before wrote),
// captured into a graph and replayed, launched plainly and with the
// ProgrammaticStreamSerialization attribute (each kernel waits on griddepcontrol.wait
// before reading, and lets its dependents launch at its start). us per replay, best of 5.
//   nvcc -O3 -std=c++17 -arch=sm_90 bench/cuda_pdl_chain.cu -o /tmp/pdl && /tmp/pdl
#include <cstdio>
#include <cuda_runtime.h>

__global__ void Step(const float* __restrict__ x, float* __restrict__ y, int n, int pdl) {
  if (pdl) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    y[i] = x[i] * 1.0001f + 0.5f;
}

static float Replay(int kernels, int n, int pdl, float* a, float* b, cudaStream_t s) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  for (int k = 0; k < kernels; ++k) {
    cudaLaunchConfig_t cfg = {};
    int blocks = (n + 255) / 256;
    cfg.gridDim = dim3(blocks > 1056 ? 1056 : blocks);
    cfg.blockDim = dim3(256);
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    const float* x = (k & 1) ? b : a;
    float* y = (k & 1) ? a : b;
    cudaLaunchKernelEx(&cfg, Step, x, y, n, pdl);
  }
  cudaStreamEndCapture(s, &g);
  if (cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) { printf("instantiate failed\n"); return -1; }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int w = 0; w < 5; ++w) cudaGraphLaunch(ge, s);
  float best = 1e30f;
  for (int rep = 0; rep < 5; ++rep) {
    cudaEventRecord(e0, s);
    for (int r = 0; r < 20; ++r) cudaGraphLaunch(ge, s);
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    if (ms * 1e3f / 20 < best) best = ms * 1e3f / 20;
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return best;
}

int main() {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const int maxn = 1 << 22;
  float *a, *b;
  cudaMalloc(&a, maxn * 4);
  cudaMalloc(&b, maxn * 4);
  cudaMemset(a, 0, maxn * 4);
  printf("| kernels | elements | plain us | pdl us | saved us/kernel |\n|---:|---:|---:|---:|---:|\n");
  for (int n : {256, 16384, 262144, 4194304})
    for (int k : {10, 60}) {
      float p = Replay(k, n, 0, a, b, s), q = Replay(k, n, 1, a, b, s);
      printf("| %d | %d | %.1f | %.1f | %.2f |\n", k, n, p, q, (p - q) / k);
    }
  cudaError_t e = cudaDeviceSynchronize();
  printf("status: %s\n", cudaGetErrorString(e));
  return 0;
}
