// Kernel-only timing of the GRU sequence kernels (backends/cuda/rnn_gru.cu): hidden 128, zero
// data, batch 1 and 256, 1/2/8/32 steps, 50 launches in a CUDA graph; the slope over steps is
// the per-step cost. Built on the device from the repository root (host helpers not linked):
//   nvcc -std=c++17 -arch=sm_90 -O3 -Icpp/src -Icpp/include --expt-relaxed-constexpr \
//     bench/cuda_gru_kernel_bench.cu -o /tmp/gru_kernel_bench -Xlinker --unresolved-symbols=ignore-all
#include "backends/cuda/rnn_gru.cu"
#include <cstdio>
using namespace kaiwu::cuda;
int main() {
  const int H = 128, G = 384;
  for (int variant = 0; variant < 2; ++variant)
  for (int64_t B : {1, 256})
  for (int64_t T : {1, 2, 8, 32}) {
    GruStepArgs a;
    a.g.seq = T; a.g.batch = B; a.g.input = H; a.g.hidden = H; a.g.dirs = 1; a.g.layout = 0;
    float *xw, *h, *R, *bias; int* flag;
    cudaMalloc(&xw, T * B * G * 4); cudaMemset(xw, 0, T * B * G * 4);
    cudaMalloc(&h, B * H * 4); cudaMemset(h, 0, B * H * 4);
    cudaMalloc(&R, G * H * 4); cudaMemset(R, 0, G * H * 4);
    cudaMalloc(&bias, 2 * G * 4); cudaMemset(bias, 0, 2 * G * 4);
    cudaMalloc(&flag, 4); cudaMemset(flag, 0, 4);
    a.xw = xw; a.h = h; a.bias = bias; a.error_flag = flag; a.linear_before_reset = true;
    size_t smem = variant == 0 ? GruSequenceMmaSmem(H) : GruSequenceSmem(H, 1);
    if (smem > 48 * 1024) cudaFuncSetAttribute(GruSequenceMmaKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    unsigned grid = variant == 0 ? (B + 15) / 16 : B;
    cudaStream_t s; cudaStreamCreate(&s);
    auto launch = [&] {
      if (variant == 0) GruSequenceMmaKernel<<<grid, kGruThreads, smem, s>>>(a, R);
      else GruSequenceKernel<1><<<grid, kGruThreads, smem, s>>>(a, R);
    };
    for (int i = 0; i < 5; ++i) launch();
    cudaStreamSynchronize(s);
    cudaGraph_t g; cudaGraphExec_t ge;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    for (int i = 0; i < 50; ++i) launch();
    cudaStreamEndCapture(s, &g); cudaGraphInstantiate(&ge, g, 0);
    cudaGraphLaunch(ge, s); cudaStreamSynchronize(s);
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    cudaEventRecord(e0, s); for (int r = 0; r < 10; ++r) cudaGraphLaunch(ge, s); cudaEventRecord(e1, s); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    printf("%s B %lld T %lld: %.2f us per kernel err=%s\n", variant == 0 ? "mma" : "fp32x1", (long long)B, (long long)T, ms * 1000 / 500, cudaGetErrorString(cudaGetLastError()));
  }
  return 0;
}
