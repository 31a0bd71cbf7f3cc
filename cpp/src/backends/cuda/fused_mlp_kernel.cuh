// The FusedMlp kernels' arguments (one struct for both kernels), the 16-bit
// mma.m16n8k16, and the one-block kernel (a block per 16 * MT rows, every
// layer's weights staged by the block). fused_mlp.cu plans and launches them;
// fused_mlp_cluster.cuh splits each layer's columns over a cluster of blocks.
//
// One-block kernel: a block owns 16 * MT rows of X; each layer's input rows live in
// shared memory in the weights' 16-bit type (K padded to 16 with zeros, rows
// padded by 8 elements so the fragment loads hit 32 distinct banks); warps
// take the layer's 8-column tiles in turn and run mma.m16n8k16 (16-bit
// operands, float32 accumulation), each layer's weights first staged in shared
// memory by the whole block with asynchronous 16-byte copies (rows padded like the inputs),
// since fragment-order loads straight from global memory touch eight lines per
// instruction and left the block waiting on L2; then add the bias, apply the activation
// in float and write the tile to shared memory for later layers and/or to the
// layer's output (float32 or 16-bit). One launch replaces a GEMM and a
// bias/activation kernel per layer and the casts at the network's edges.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/half_util.cuh"

namespace kaiwu {
namespace cuda {

constexpr int kMlpThreads = 512;
constexpr int kMlpWarps = kMlpThreads / 32;
constexpr int kMlpMaxLayers = 8;
constexpr int64_t kMlpMaxSmem = 220 * 1024;

struct MlpLayerArgs {
  const uint16_t* w = nullptr;  // [N, K] (trans_b) or [K, N], 16-bit
  const uint16_t* b = nullptr;  // [N] or null
  int k = 0, n = 0, kp = 0;     // kp: K rounded up to 16
  int trans_b = 1;
  int vec16 = 0;  // W [N, K], K % 8 == 0, 16-byte aligned: staged in 16-byte loads
  int in_off = 0, in_stride = 0;    // input rows in shared memory (elements)
  int out_off = -1, out_stride = 0;  // this layer's rows kept for later layers (-1: not kept)
  DeviceActivation act;
  void* y = nullptr;  // the node's output of this layer, or null
  int y_float = 0;
  // Cluster kernel only: the layer's phase, its first tile among the phase's
  // 8-column tiles and the phase's count, its weight slice (elements) and bias
  // slice (floats from bias_smem).
  int phase = 0, tile0 = 0, ptiles = 0, ws_off = 0, bias_off = 0;
};

struct MlpArgs {
  const void* x = nullptr;
  int x_float = 0;
  int64_t m = 0;
  int k0 = 0, x_stride = 0;
  int layers = 0;
  int smem_elems = 0;  // the row buffers (zeroed at start)
  int w_off = 0;       // the weight stage: [round8(N)][kp + 8] of the layer at hand
  MlpLayerArgs layer[kMlpMaxLayers];
  // Cluster kernel only (fused_mlp_cluster.cuh): blocks per cluster; phases
  // (layers that read X or only earlier phases' outputs); per phase its tiles,
  // the cp.async groups that may still be pending once its weights are in
  // (layers after its last one), and whether a later phase reads it (a cluster
  // barrier after it); the bias slices in shared memory (float, byte offset).
  int cluster = 0, phases = 0;
  int phase_tiles[kMlpMaxLayers] = {}, phase_pending[kMlpMaxLayers] = {}, phase_sync[kMlpMaxLayers] = {};
  int bias_smem = 0;
  long long* stamps = nullptr;  // bench only: clock64() of block b's steps at [32 b + step]
};

// Stages W as [n][k] rows of kp + 8 elements at `ws`, zeros in [K, kp).
__device__ __forceinline__ void StageWeights(const MlpLayerArgs& L, uint16_t* ws, int tid) {
  const int wst = L.kp + 8;
  if (L.vec16) {
    const int chunks = L.k / 8;
    const uint4* src = reinterpret_cast<const uint4*>(L.w);
    // Asynchronous copies: all of a thread's 16-byte loads in flight at once.
    for (int i = tid; i < L.n * chunks; i += kMlpThreads) {
      const int n = i / chunks, c = i - n * chunks;
      __pipeline_memcpy_async(ws + n * wst + c * 8, src + i, 16);
    }
    __pipeline_commit();
  } else if (L.trans_b) {
    for (int i = tid; i < L.n * L.k; i += kMlpThreads) {
      const int n = i / L.k, k = i - n * L.k;
      ws[n * wst + k] = __ldg(L.w + i);
    }
  } else {  // [K, N]: read along N (coalesced), write transposed
    for (int i = tid; i < L.n * L.k; i += kMlpThreads) {
      const int k = i / L.n, n = i - k * L.n;
      ws[n * wst + k] = __ldg(L.w + i);
    }
  }
  const int pad = L.kp - L.k;
  for (int i = tid; i < L.n * pad; i += kMlpThreads) {
    const int n = i / pad;
    ws[n * wst + L.k + (i - n * pad)] = 0;
  }
  if (L.vec16) __pipeline_wait_prior(0);  // this thread's copies; the caller's barrier publishes them
}

template <typename T, int MT>
__global__ void __launch_bounds__(kMlpThreads) FusedMlpKernel(const __grid_constant__ MlpArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sm = reinterpret_cast<T*>(smem_raw);
  constexpr int kRows = 16 * MT;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  // Zeros first: K padding and rows past M read as 0 in every layer.
  for (int i = tid; i < a.smem_elems; i += kMlpThreads) sm[i] = Store<T>(0.f);
  __syncthreads();
  for (int i = tid; i < kRows * a.k0; i += kMlpThreads) {
    const int r = i / a.k0, c = i - r * a.k0;
    const int64_t gr = r0 + r;
    if (gr >= a.m) break;
    const float v = a.x_float ? static_cast<const float*>(a.x)[gr * a.k0 + c]
                              : Load(static_cast<const T*>(a.x)[gr * a.k0 + c]);
    sm[r * a.x_stride + c] = Store<T>(v);
  }
  __syncthreads();
  for (int l = 0; l < a.layers; ++l) {
    const MlpLayerArgs& L = a.layer[l];
    const T* in = sm + L.in_off;
    const int ntiles = (L.n + 7) / 8, ktiles = L.kp / 16;
    uint16_t* ws = reinterpret_cast<uint16_t*>(sm + a.w_off);
    StageWeights(L, ws, tid);
    __syncthreads();
    const int wst = L.kp + 8;
    for (int nt = warp; nt < ntiles; nt += kMlpWarps) {
      float c[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) c[mt][0] = c[mt][1] = c[mt][2] = c[mt][3] = 0.f;
      const int n = nt * 8 + gid;
      const bool n_ok = n < L.n;
      const uint16_t* wrow = ws + n * wst + 2 * tig;
#pragma unroll 4
      for (int kt = 0; kt < ktiles; ++kt) {
        const uint32_t b0 = n_ok ? *reinterpret_cast<const uint32_t*>(wrow + kt * 16) : 0u;
        const uint32_t b1 = n_ok ? *reinterpret_cast<const uint32_t*>(wrow + kt * 16 + 8) : 0u;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const T* a_lo = in + (mt * 16 + gid) * L.in_stride + kt * 16 + 2 * tig;
          const T* a_hi = a_lo + 8 * L.in_stride;
          Mma16816<T>(c[mt], *reinterpret_cast<const uint32_t*>(a_lo), *reinterpret_cast<const uint32_t*>(a_hi),
                      *reinterpret_cast<const uint32_t*>(a_lo + 8), *reinterpret_cast<const uint32_t*>(a_hi + 8),
                      b0, b1);
        }
      }
      // c[mt][2h + e]: row mt * 16 + gid + 8h, column nt * 8 + 2 tig + e.
#pragma unroll 1
      for (int e = 0; e < 2; ++e) {
        const int col = nt * 8 + 2 * tig + e;
        if (col >= L.n) continue;
        const float bias = L.b ? Load(reinterpret_cast<const T*>(L.b)[col]) : 0.f;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = mt * 16 + gid + 8 * h;
            const float v = L.act(c[mt][2 * h + e] + bias);
            if (L.out_off >= 0) sm[L.out_off + r * L.out_stride + col] = Store<T>(v);
            const int64_t gr = r0 + r;
            if (L.y && gr < a.m) {
              if (L.y_float)
                static_cast<float*>(L.y)[gr * L.n + col] = v;
              else
                static_cast<T*>(L.y)[gr * L.n + col] = Store<T>(v);
            }
          }
      }
    }
    __syncthreads();
  }
}

}  // namespace cuda
}  // namespace kaiwu
