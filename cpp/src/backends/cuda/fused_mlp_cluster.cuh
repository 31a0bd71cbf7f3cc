// FusedMlp over a thread-block cluster (sm_90): the blocks of a cluster share
// 16 * MT rows and split each layer's 8-column tiles among themselves, so the
// weight bytes come in through many SMs at once instead of one.
//
// - Layers run in phases: a phase is the layers whose inputs are X or earlier
//   phases' outputs (the mlp: body 0, body 1, both heads); its layers' tiles
//   are numbered one after another and rank r of C takes tiles
//   [P r / C, P (r + 1) / C) of the phase's P.
// - At the start every block issues asynchronous copies (cp.async) of its
//   slices of all layers' weights, one commit group per layer, and waits for a
//   phase's group just before that phase: the later layers load while the
//   earlier ones compute.
// - Every block keeps the full row buffers (X and each layer output a later
//   layer reads) in its own shared memory. A warp takes one of the block's
//   tiles over all of K (mma.m16n8k16), adds the bias (its slices loaded into
//   shared memory at the start) and applies the activation in registers, writes
//   the layer's output to global memory and, for a layer a later one reads, the
//   tile into the row buffers of every block of the cluster (distributed shared
//   memory), followed by one cluster barrier per phase that a later one reads.
//   The start's barrier (every block's buffers zeroed) is split in arrive and
//   wait around the loads of X and the bias.
//
// Measured (bench/cuda_fused_mlp_bench.cu, bench/notes/cuda.md): the kernel is
// bound by chains of dependent latencies, not by the products: K split among
// warps (with a reduction through shared memory) and rows copied after the
// epilogue in 16-byte pieces each cost more barriers and steps than they saved.
#pragma once

#include <cooperative_groups.h>

#include <cstring>

#include "backends/cuda/fused_mlp_kernel.cuh"

namespace kaiwu {
namespace cuda {

constexpr int kMlpClusterThreads = 512;
constexpr int kMlpClusterWarps = kMlpClusterThreads / 32;
constexpr int kMlpMaxCluster = 16;

/// Rank r of c's share [*lo, *hi) of `tiles` tiles.
__host__ __device__ inline void RankTiles(int tiles, int c, int r, int* lo, int* hi) {
  *lo = tiles * r / c;
  *hi = tiles * (r + 1) / c;
}

/// Columns [*n0, *n1) of layer L that rank tiles [lo, hi) of its phase cover (empty: n0 >= n1).
__host__ __device__ inline void SliceColumns(const MlpLayerArgs& L, int lo, int hi, int* n0, int* n1) {
  const int tiles = (L.n + 7) / 8;
  const int t0 = lo > L.tile0 ? lo : L.tile0;
  const int t1 = hi < L.tile0 + tiles ? hi : L.tile0 + tiles;
  *n0 = (t0 - L.tile0) * 8;
  *n1 = t1 > t0 ? ((t1 - L.tile0) * 8 < L.n ? (t1 - L.tile0) * 8 : L.n) : *n0;
}

// Stages W columns [n0, n1) as [n - n0][kp + 8] at `ws`, zeros in [K, kp):
// cp.async for [N, K] rows of 16-byte chunks, else eight loads in flight per thread.
__device__ __forceinline__ void StageSlice(const MlpLayerArgs& L, uint16_t* ws, int n0, int n1, int tid) {
  const int wst = L.kp + 8, rows = n1 - n0;
  if (rows <= 0) return;
  if (L.vec16) {
    const int chunks = L.k / 8;
    const uint4* src = reinterpret_cast<const uint4*>(L.w + static_cast<int64_t>(n0) * L.k);
    for (int i = tid; i < rows * chunks; i += kMlpClusterThreads) {
      const int n = i / chunks, c = i - n * chunks;
      __pipeline_memcpy_async(ws + n * wst + c * 8, src + i, 16);
    }
  } else {
    const int total = rows * L.k;
    // [N, K]: i runs along K; [K, N]: along the slice's columns (coalesced reads).
    const auto nk = [&](int i, int* n, int* k) {
      if (L.trans_b) {
        *n = i / L.k;
        *k = i - *n * L.k;
      } else {
        *k = i / rows;
        *n = i - *k * rows;
      }
    };
    for (int base = tid; base < total; base += 8 * kMlpClusterThreads) {
      uint16_t v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int i = base + j * kMlpClusterThreads;
        int n = 0, k = 0;
        if (i < total) nk(i, &n, &k);
        v[j] = i < total ? __ldg(L.w + (L.trans_b ? static_cast<int64_t>(n0 + n) * L.k + k
                                                  : static_cast<int64_t>(k) * L.n + n0 + n))
                         : uint16_t{0};
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int i = base + j * kMlpClusterThreads;
        if (i >= total) break;
        int n = 0, k = 0;
        nk(i, &n, &k);
        ws[n * wst + k] = v[j];
      }
    }
  }
  const int pad = L.kp - L.k;
  for (int i = tid; i < rows * pad; i += kMlpClusterThreads) {
    const int n = i / pad;
    ws[n * wst + L.k + (i - n * pad)] = 0;
  }
}

// cp.async.wait_group with a run-time count (the instruction takes an immediate).
__device__ __forceinline__ void WaitPending(int n) {
  switch (n) {
    case 0: __pipeline_wait_prior(0); break;
    case 1: __pipeline_wait_prior(1); break;
    case 2: __pipeline_wait_prior(2); break;
    case 3: __pipeline_wait_prior(3); break;
    case 4: __pipeline_wait_prior(4); break;
    case 5: __pipeline_wait_prior(5); break;
    case 6: __pipeline_wait_prior(6); break;
    default: __pipeline_wait_prior(7); break;
  }
}

// The layer of phase p that phase tile g belongs to.
__device__ __forceinline__ int LayerOfTile(const MlpArgs& a, int p, int g) {
  for (int l = 0; l < a.layers; ++l) {
    const MlpLayerArgs& L = a.layer[l];
    if (L.phase == p && g >= L.tile0 && g < L.tile0 + (L.n + 7) / 8) return l;
  }
  return 0;  // not reached: the phase's tiles are its layers'
}

// The cluster barrier in halves: arrive (release: this thread's shared-memory
// writes, remote ones too, before it) and wait (acquire).
__device__ __forceinline__ void ClusterArrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void ClusterWait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }

// Bench only (a.stamps): thread 0's clock64() at step 0 start, 17 X and bias
// loads issued, 18 weight copies issued, 19 rows zeroed, 20 X stored and
// arrived, 1 bias stored, 2 the first phase's weights in, 3 + 2p phase p
// computed and written, 4 + 2p its barrier passed.
__device__ __forceinline__ void Stamp(const MlpArgs& a, int step) {
  if (a.stamps && threadIdx.x == 0) a.stamps[blockIdx.x * 32 + step] = clock64();
}

template <typename T, int MT>
__global__ void __launch_bounds__(kMlpClusterThreads, 1) FusedMlpClusterKernel(const __grid_constant__ MlpArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sm = reinterpret_cast<T*>(smem_raw);
  float* fl = reinterpret_cast<float*>(smem_raw + a.bias_smem);
  constexpr int kRows = 16 * MT;
  constexpr int kThreads = kMlpClusterThreads;
  const int csize = a.cluster, rank = static_cast<int>(cluster.block_rank());
  const int64_t r0 = static_cast<int64_t>(blockIdx.x / csize) * kRows;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  Stamp(a, 0);

  // Global loads first, all in flight together: X's first rows (the rest
  // below) and every layer's bias slice, kept as raw bits until stored (a
  // conversion here would wait for each load in turn).
  const int x_rows = a.m - r0 < kRows ? static_cast<int>(a.m - r0) : kRows, x_valid = x_rows * a.k0;
  const auto load_x = [&](int i) -> uint32_t {
    const int r = i / a.k0, c = i - r * a.k0;
    const int64_t g = (r0 + r) * a.k0 + c;
    return a.x_float ? __float_as_uint(__ldg(static_cast<const float*>(a.x) + g))
                     : __ldg(static_cast<const unsigned short*>(a.x) + g);
  };
  const auto store_x = [&](int i, uint32_t v) {
    const int r = i / a.k0;
    sm[r * a.x_stride + i - r * a.k0] = a.x_float ? Store<T>(__uint_as_float(v)) : FromBits<T>(v);
  };
  uint32_t xv[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) xv[j] = tid + j * kThreads < x_valid ? load_x(tid + j * kThreads) : 0u;
  unsigned short bv[kMlpMaxLayers];
  int n0s[kMlpMaxLayers], n1s[kMlpMaxLayers];
#pragma unroll
  for (int l = 0; l < kMlpMaxLayers; ++l) {
    if (l >= a.layers) break;
    const MlpLayerArgs& L = a.layer[l];
    int lo, hi;
    RankTiles(L.ptiles, csize, rank, &lo, &hi);
    SliceColumns(L, lo, hi, &n0s[l], &n1s[l]);
    bv[l] = L.b && tid < n1s[l] - n0s[l] ? __ldg(L.b + n0s[l] + tid) : static_cast<unsigned short>(0);
  }
  Stamp(a, 17);
  // Every layer's weight slice in flight, one cp.async group per layer (empty groups too).
#pragma unroll
  for (int l = 0; l < kMlpMaxLayers; ++l) {
    if (l >= a.layers) break;
    StageSlice(a.layer[l], reinterpret_cast<uint16_t*>(sm + a.layer[l].ws_off), n0s[l], n1s[l], tid);
    __pipeline_commit();
  }
  Stamp(a, 18);
  // The row buffers zeroed (K padding, rows past M), then X's rows written
  // and the cluster told: others write into the buffers only after that.
  for (int i = tid; i < a.smem_elems / 8; i += kThreads) reinterpret_cast<uint4*>(sm)[i] = make_uint4(0, 0, 0, 0);
  __syncthreads();
  Stamp(a, 19);
#pragma unroll
  for (int j = 0; j < 4; ++j)
    if (tid + j * kThreads < x_valid) store_x(tid + j * kThreads, xv[j]);
  for (int i = tid + 4 * kThreads; i < x_valid; i += kThreads) store_x(i, load_x(i));
  ClusterArrive();
  Stamp(a, 20);
#pragma unroll
  for (int l = 0; l < kMlpMaxLayers; ++l) {
    if (l >= a.layers) break;
    const int cnt = n1s[l] - n0s[l];
    float* dst = fl + a.layer[l].bias_off;
    if (tid < cnt) dst[tid] = Load(FromBits<T>(bv[l]));
    const T* bias = reinterpret_cast<const T*>(a.layer[l].b);
    for (int i = tid + kThreads; i < cnt; i += kThreads) dst[i] = bias ? Load(bias[n0s[l] + i]) : 0.f;
  }
  Stamp(a, 1);
  WaitPending(a.phase_pending[0]);
  __syncthreads();
  Stamp(a, 2);
  ClusterWait();  // every block's rows zeroed: from here on blocks write into each other

  for (int p = 0; p < a.phases; ++p) {
    int lo, hi;
    RankTiles(a.phase_tiles[p], csize, rank, &lo, &hi);
    // A warp per tile, all of K, then bias, activation and the writes straight from the registers.
    for (int g = lo + warp; g < hi; g += kMlpClusterWarps) {
      const MlpLayerArgs& L = a.layer[LayerOfTile(a, p, g)];
      const int first = (lo > L.tile0 ? lo : L.tile0) - L.tile0;  // the layer's first tile staged here
      const int nt = g - L.tile0, wst = L.kp + 8, ktiles = L.kp / 16;
      const bool n_ok = nt * 8 + gid < L.n;
      const uint16_t* wrow = reinterpret_cast<const uint16_t*>(sm + L.ws_off) + ((nt - first) * 8 + gid) * wst + 2 * tig;
      const T* in = sm + L.in_off;
      float c[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) c[mt][0] = c[mt][1] = c[mt][2] = c[mt][3] = 0.f;
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
      // c[mt][2h + e]: row mt * 16 + gid + 8h, column col + e.
      const int col = nt * 8 + 2 * tig;
      if (col >= L.n) continue;
      const bool two = col + 1 < L.n;
      const float* bias = fl + L.bias_off + col - first * 8;
      const float bias0 = bias[0], bias1 = two ? bias[1] : 0.f;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = mt * 16 + gid + 8 * h;
          const float v0 = L.act(c[mt][2 * h] + bias0), v1 = two ? L.act(c[mt][2 * h + 1] + bias1) : 0.f;
          const int64_t gr = r0 + row;
          if (L.y && gr < a.m) {
            if (L.y_float) {
              float* y = static_cast<float*>(L.y) + gr * L.n + col;
              y[0] = v0;
              if (two) y[1] = v1;
            } else {
              T* y = static_cast<T*>(L.y) + gr * L.n + col;
              y[0] = Store<T>(v0);
              if (two) y[1] = Store<T>(v1);
            }
          }
          if (L.out_off >= 0) {
            // The pair into every block's rows (col even, strides even: 4-byte aligned;
            // past N the second is 0, as the padding there).
            T* mine = sm + L.out_off + row * L.out_stride + col;
            const uint32_t pair = Bits<T>(v0) | static_cast<uint32_t>(Bits<T>(v1)) << 16;
            *reinterpret_cast<uint32_t*>(mine) = pair;
            for (int q = 0; q < csize; ++q)
              if (q != rank) *reinterpret_cast<uint32_t*>(cluster.map_shared_rank(mine, q)) = pair;
          }
        }
    }
    Stamp(a, 3 + 2 * p);
    if (p + 1 == a.phases) break;
    if (a.phase_sync[p]) ClusterArrive();
    WaitPending(a.phase_pending[p + 1]);
    if (a.phase_sync[p])
      ClusterWait();  // the phase's rows are in every block, the next weights in
    else
      __syncthreads();  // the next phase's weights in
    Stamp(a, 4 + 2 * p);
  }
#endif
}

}  // namespace cuda
}  // namespace kaiwu
