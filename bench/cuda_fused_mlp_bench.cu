// Kernel-only timing of FusedMlpKernel (backends/cuda/fused_mlp.cu): mlp-shaped layers
// (64 -> 256 -> 256 -> 18 + 1) and parts of them, 50 launches in a CUDA graph, zero data.
// Built on the device from the repository root (the kernel's host helpers are not linked):
//   nvcc -std=c++17 -arch=sm_90 -O3 -Icpp/src -Icpp/include --expt-relaxed-constexpr \
//     bench/cuda_fused_mlp_bench.cu -o /tmp/fused_mlp_bench -Xlinker --unresolved-symbols=ignore-all
// variants: 0 all four layers, 1 layer 0, 2 layers 0-1, 3 the two heads on X, 4 one 8-column tile.
#include "backends/cuda/fused_mlp.cu"
#include <cstdio>
#include <vector>
using namespace kaiwu::cuda;
static int64_t R16(int64_t v) { return (v + 15) / 16 * 16; }
int main() {
  struct LC { int input; int n; int act; };
  const int k0 = 64;
  std::vector<LC> all = {{-1, 256, 3}, {0, 256, 3}, {1, 18, 0}, {1, 1, 0}};
  for (int variant = 0; variant < 5; ++variant)
  for (int64_t m : {1, 256}) {
    std::vector<LC> ls = all;
    if (variant == 1) ls.resize(1);
    if (variant == 2) ls.resize(2);
    if (variant == 3) ls = {{-1, 18, 0}, {-1, 1, 0}};  // heads only
    if (variant == 4) ls = {{-1, 8, 0}};              // one tile
    const int L = ls.size();
    MlpArgs a;
    a.m = m; a.layers = L; a.x_float = 1; a.k0 = k0;
    std::vector<bool> kept(L, false);
    for (auto& l : ls) if (l.input >= 0) kept[l.input] = true;
    int64_t per_row = R16(k0) + 8; a.x_stride = per_row;
    std::vector<int> off(L, -1), stride(L, 0);
    for (int l = 0; l < L; ++l) if (kept[l]) { stride[l] = R16(ls[l].n) + 8; off[l] = per_row; per_row += stride[l]; }
    const int rows = 16;
    a.smem_elems = rows * per_row;
    int64_t stage = 0;
    for (int l = 0; l < L; ++l) { int k = ls[l].input < 0 ? k0 : ls[ls[l].input].n; stage = std::max<int64_t>(stage, (ls[l].n + 7) / 8 * 8 * (R16(k) + 8)); }
    a.w_off = a.smem_elems;
    size_t smem = (rows * per_row + stage) * 2;
    if (smem > 48 * 1024) cudaFuncSetAttribute(FusedMlpKernel<__half, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    float* x; cudaMalloc(&x, m * k0 * 4); cudaMemset(x, 0, m * k0 * 4);
    for (int l = 0; l < L; ++l) {
      const int k = ls[l].input < 0 ? k0 : ls[ls[l].input].n;
      MlpLayerArgs& d = a.layer[l];
      d.k = k; d.n = ls[l].n; d.kp = R16(k); d.trans_b = 1; d.vec16 = (k % 8 == 0);
      d.in_off = ls[l].input < 0 ? 0 : rows * off[ls[l].input];
      d.in_stride = ls[l].input < 0 ? a.x_stride : stride[ls[l].input];
      d.out_off = kept[l] ? rows * off[l] : -1; d.out_stride = stride[l];
      d.act.kind = ls[l].act;
      uint16_t* w; cudaMalloc(&w, d.n * k * 2); cudaMemset(w, 0, d.n * k * 2); d.w = w;
      uint16_t* b; cudaMalloc(&b, d.n * 2); cudaMemset(b, 0, d.n * 2); d.b = b;
      void* y; cudaMalloc(&y, m * d.n * 4); d.y = (l >= 2 || variant >= 1) ? y : nullptr; d.y_float = 1;
    }
    a.x = x;
    cudaStream_t s; cudaStreamCreate(&s);
    for (int i = 0; i < 10; ++i) FusedMlpKernel<__half, 1><<<(m + 15) / 16, kMlpThreads, smem, s>>>(a);
    cudaStreamSynchronize(s);
    cudaGraph_t g; cudaGraphExec_t ge;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    for (int i = 0; i < 50; ++i) FusedMlpKernel<__half, 1><<<(m + 15) / 16, kMlpThreads, smem, s>>>(a);
    cudaStreamEndCapture(s, &g); cudaGraphInstantiate(&ge, g, 0);
    cudaGraphLaunch(ge, s); cudaStreamSynchronize(s);
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    cudaEventRecord(e0, s); for (int r = 0; r < 10; ++r) cudaGraphLaunch(ge, s); cudaEventRecord(e1, s); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    printf("variant %d layers %d m %lld: %.2f us per kernel (graph of 50) err=%s\n", variant, L, (long long)m, ms * 1000 / 500, cudaGetErrorString(cudaGetLastError()));
  }
  return 0;
}
