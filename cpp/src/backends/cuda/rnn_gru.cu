// GRU on CUDA (ONNX semantics, gate order z, r, h), float32, default
// activations (Sigmoid, Tanh) only. Supports both directions and
// bidirectional, layouts 0 and 1, linear_before_reset 0 and 1, optional B,
// sequence_lens, initial_h, clip, and Y and/or Y_h. The method is in
// rnn_common.cuh; with linear_before_reset = 0 a step runs two GEMMs: h * Rzr^T,
// the z/r gate kernel producing r . h, then (r . h) * Rh^T before the update.
#include <algorithm>
#include <cstdlib>
#include <limits>

#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include "backends/cuda/rnn_common.cuh"

namespace kaiwu {
namespace cuda {
namespace {

// gates: [batch, 3H]: h * R^T for z, r and h (linear_before_reset), or: z, r
// (written by GruResetKernel) and (r . h) * Rh^T. bias: [6H], Wb then Rb (z, r,
// h each).
struct GruStepArgs : RnnStepArgs {
  bool linear_before_reset = false;
  bool r_half = false;  // the tensor-core kernels' R is float16 (a half session's derived copy)
  float* rh = nullptr;  // [batch, H]: r . h (linear_before_reset = 0)
};

// z and r of one (row, unit): f(clip(h * R^T + X * W^T + Wb + Rb)).
__device__ inline void GruZr(const GruStepArgs& a, const float* hr, const float* xw, int64_t j,
                             float* z, float* r) {
  const int64_t H = a.g.hidden, G = 3 * H;
  const float bz = a.bias ? a.bias[j] + a.bias[G + j] : 0.f;
  const float br = a.bias ? a.bias[H + j] + a.bias[G + H + j] : 0.f;
  *z = SigmoidF(a.g.Clip(hr[0] + (xw[0] + bz)));
  *r = SigmoidF(a.g.Clip(hr[H] + (xw[H] + br)));
}

// linear_before_reset = 0, first half of a step: z and r into gates[:, 0:2H],
// r . h into rh (0 in rows whose sequence ended, so the next GEMM reads defined data).
__global__ void GruResetKernel(GruStepArgs a) {
  const int64_t H = a.g.hidden, G = 3 * H;
  KAIWU_CUDA_LOOP(i, a.g.batch * H) {
    const int64_t b = i / H, j = i - b * H;
    const int64_t t = a.Time(b);
    if (t < 0) {
      a.rh[i] = 0.f;
      continue;
    }
    float* hr = a.gates + b * G + j;
    float z, r;
    GruZr(a, hr, a.xw + a.g.XRow(t, b) * G + j, j, &z, &r);
    hr[0] = z;
    hr[H] = r;
    a.rh[i] = r * a.PrevH(i, b, j);
  }
}

// The candidate and the state update of one step:
//   linear_before_reset = 1: hh = tanh(clip(Xh + Wbh + r . (h * Rh^T + Rbh)))
//   linear_before_reset = 0: hh = tanh(clip((r . h) * Rh^T + Xh + Wbh + Rbh))
//   h = (1 - z) . hh + z . h
// of row b, unit j at time t, from its previous h.
__device__ inline float GruNewH(const GruStepArgs& a, int64_t t, int64_t b, int64_t j, float h_old) {
  const int64_t H = a.g.hidden, G = 3 * H;
  const float* hr = a.gates + b * G + j;
  const float* xw = a.xw + a.g.XRow(t, b) * G + j;
  const float wbh = a.bias ? a.bias[2 * H + j] : 0.f;
  const float rbh = a.bias ? a.bias[G + 2 * H + j] : 0.f;
  float z, pre;
  if (a.linear_before_reset) {
    float r;
    GruZr(a, hr, xw, j, &z, &r);
    pre = xw[2 * H] + wbh + r * (hr[2 * H] + rbh);
  } else {
    z = hr[0];
    pre = hr[2 * H] + (xw[2 * H] + wbh + rbh);
  }
  const float hh = tanhf(a.g.Clip(pre));
  return (1.f - z) * hh + z * h_old;
}

// One step of every (row, unit). With folded states, step 0 reads h from
// initial_h (and writes every row's scratch h) and the last step writes Y_h;
// a row whose sequence has ended keeps its h.
__global__ void GruStepKernel(GruStepArgs a) {
  const int64_t H = a.g.hidden;
  KAIWU_CUDA_LOOP(i, a.g.batch * H) {
    const int64_t b = i / H, j = i - b * H;
    const int64_t t = a.Time(b);
    const float h_old = a.PrevH(i, b, j);
    float h_new = h_old;
    if (t >= 0) {
      h_new = GruNewH(a, t, b, j, h_old);
      if (a.y) a.StoreY(a.g.YOffset(t, a.d, b) + j, h_new);
    }
    if (t >= 0 || a.FromInit()) a.h[i] = h_new;
    if (a.ToFinal() && a.y_h) a.y_h[a.g.StateOffset(a.d, b) + j] = h_new;
  }
}

// linear_before_reset = 1, hidden <= 128: every step of one direction in one
// launch. One thread per gate row (3H threads) holds its row of R in registers
// for the whole sequence; the block keeps h of kRows batch rows in shared
// memory. Per step each thread computes its gate row's h * R[j]^T for each of
// the block's rows (h read as broadcast float4s, independent accumulators),
// then thread group g = tid / H does GruStepKernel's math for hidden unit
// tid % H of rows g, g + 3, ... (its X * W^T loaded before the products, the
// biases once). One launch instead of a GEMM and a gate kernel per step, which
// at small batches are all launch latency. kRows is chosen so that the blocks
// fill the GPU once (GruSequenceRows).
// What a sequence-kernel thread keeps for its hidden unit j and the batch rows
// it updates (group, group + groups, ... of its block, at most kMax): the
// biases, loaded once, and per step the rows' times and X * W^T, loaded before
// the step's products.
template <int kMax>
struct GruUnitRows {
  float bz = 0.f, br = 0.f, wbh = 0.f, rbh = 0.f;
  int64_t t[kMax];
  float xz[kMax], xr[kMax], xh[kMax];

  __device__ void LoadBiases(const GruStepArgs& a, int j) {
    if (!a.bias) return;
    const int64_t H = a.g.hidden, G = 3 * H;
    bz = a.bias[j] + a.bias[G + j];
    br = a.bias[H + j] + a.bias[G + H + j];
    wbh = a.bias[2 * H + j];
    rbh = a.bias[G + 2 * H + j];
  }

  // t[k] < 0: no such row, or its sequence has ended (its h stays).
  __device__ void LoadStep(const GruStepArgs& a, int64_t s, int64_t b0, int rows, int group, int groups,
                           int j, bool updates) {
    const int64_t H = a.g.hidden, G = 3 * H;
#pragma unroll
    for (int k = 0; k < kMax; ++k) {
      const int r = group + groups * k;
      t[k] = -1;
      if (!updates || r >= rows) continue;
      const int64_t b = b0 + r;
      t[k] = RnnStepTime(a.g, a.lens, a.d, s, b, a.error_flag, a.step);
      if (t[k] < 0) continue;
      const float* xw = a.xw + a.g.XRow(t[k], b) * G + j;
      xz[k] = xw[0];
      xr[k] = xw[H];
      xh[k] = xw[2 * H];
    }
  }

  // Row k's new h (GruStepKernel's math, linear_before_reset): g points at the
  // row's h * R^T for unit j, the z, r and h gates `stride` apart.
  __device__ float Update(const GruStepArgs& a, int k, const float* g, float h_old, int stride) const {
    const float z = SigmoidF(a.g.Clip(g[0] + (xz[k] + bz)));
    const float rg = SigmoidF(a.g.Clip(g[stride] + (xr[k] + br)));
    const float pre = xh[k] + wbh + rg * (g[2 * stride] + rbh);
    const float cand = tanhf(a.g.Clip(pre));
    return (1.f - z) * cand + z * h_old;
  }
};

constexpr int kGruMaxHidden = 128;
constexpr int kGruThreads = 3 * kGruMaxHidden;
constexpr int kGruMaxRows = 4;  // 8 spills registers (168 per thread at 384 threads)

size_t GruSequenceSmem(int64_t H, int rows) {
  return sizeof(float) * static_cast<size_t>(rows * (H + 3 * H));
}

template <int kRows>
__global__ void __launch_bounds__(kGruThreads, 1) GruSequenceKernel(GruStepArgs a, const float* __restrict__ R) {
  extern __shared__ __align__(16) float sm[];
  constexpr int kAcc = kRows >= 4 ? 1 : 4 / kRows;  // accumulators per row
  constexpr int kPerThread = (kRows + 2) / 3;       // rows a thread updates
  const int H = static_cast<int>(a.g.hidden), G = 3 * H;  // H <= kGruMaxHidden, H % 4 == 0
  const int64_t b0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int rows = static_cast<int>(min(static_cast<int64_t>(kRows), a.g.batch - b0));
  const int tid = threadIdx.x;
  const int j = tid % H, group = tid / H;  // the unit and the rows this thread updates
  float* hs = sm;                // h [kRows][H] (zeros past `rows`)
  float* hr = hs + kRows * H;    // h * R^T [kRows][G]
  float4 w[kGruMaxHidden / 4];   // row tid of R (zeros past H)
#pragma unroll
  for (int q = 0; q < kGruMaxHidden / 4; ++q)
    w[q] = tid < G && 4 * q < H ? __ldg(reinterpret_cast<const float4*>(R + static_cast<int64_t>(tid) * H) + q)
                                : make_float4(0.f, 0.f, 0.f, 0.f);
  const bool updates = tid < G;
  GruUnitRows<kPerThread> unit;
  if (updates) unit.LoadBiases(a, j);
  for (int i = tid; i < kRows * H; i += blockDim.x) hs[i] = i < rows * H ? a.StartH(b0 + i / H, i % H) : 0.f;
  __syncthreads();
  for (int64_t s = 0; s < a.g.seq; ++s) {
    unit.LoadStep(a, s, b0, rows, group, 3, j, updates);
    if (updates) {
      float acc[kRows][kAcc];
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int c = 0; c < kAcc; ++c) acc[r][c] = 0.f;
#pragma unroll
      for (int q = 0; q < kGruMaxHidden / 4; ++q) {
        if (4 * q < H) {
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            const float4 hv = reinterpret_cast<const float4*>(hs + r * H)[q];
            if constexpr (kAcc == 4) {
              acc[r][0] += hv.x * w[q].x;
              acc[r][1] += hv.y * w[q].y;
              acc[r][2] += hv.z * w[q].z;
              acc[r][3] += hv.w * w[q].w;
            } else if constexpr (kAcc == 2) {
              acc[r][0] += hv.x * w[q].x + hv.y * w[q].y;
              acc[r][1] += hv.z * w[q].z + hv.w * w[q].w;
            } else {
              acc[r][0] += hv.x * w[q].x + hv.y * w[q].y + hv.z * w[q].z + hv.w * w[q].w;
            }
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float v = acc[r][0];
#pragma unroll
        for (int c = 1; c < kAcc; ++c) v += acc[r][c];
        hr[r * G + tid] = v;
      }
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      if (unit.t[k] < 0) continue;
      const int r = group + 3 * k;
      const int i = r * H + j;
      const float h_new = unit.Update(a, k, hr + r * G + j, hs[i], H);
      hs[i] = h_new;  // only this thread reads or writes hs[i] until the next barrier
      if (a.y) a.StoreY(a.g.YOffset(unit.t[k], a.d, b0 + r) + j, h_new);
    }
    __syncthreads();
  }
  for (int i = tid; i < rows * H; i += blockDim.x) a.EndH(b0 + i / H, i % H, hs[i]);
}

// Rows per block of the sequence kernel: the fewest (1, 2, 4) whose blocks fit
// on the GPU's SMs at once (one block per SM), else 4.
int GruSequenceRows(int64_t batch) {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0)
    sms = 1;
  for (int rows = 1; rows < kGruMaxRows; rows *= 2)
    if ((batch + rows - 1) / rows <= sms) return rows;
  return kGruMaxRows;
}

void LaunchGruSequence(int rows, int64_t batch, size_t smem, cudaStream_t stream,
                       const GruStepArgs& args, const float* r) {
  const unsigned grid = static_cast<unsigned>((batch + rows - 1) / rows);
  switch (rows) {
    case 1: GruSequenceKernel<1><<<grid, kGruThreads, smem, stream>>>(args, r); break;
    case 2: GruSequenceKernel<2><<<grid, kGruThreads, smem, stream>>>(args, r); break;
    default: GruSequenceKernel<4><<<grid, kGruThreads, smem, stream>>>(args, r); break;
  }
  CheckLaunch("GRU sequence kernel");
}

// The sequence kernel on tensor cores, for half-precision sessions
// (Node::tf32_gemms), hidden <= 128 and hidden % 16 == 0: a block runs 16 batch
// rows (one MMA row tile); per step h * R^T is one [16, H] x [H, 3H] product of
// mma.m16n8k16 with FP16 operands and float32 accumulation. Warp w owns the
// 8-column tiles w, w + 12, ... of the 3H gate rows, with their R fragments in
// registers for the whole sequence; h is kept in float32 for the state update
// and as an FP16 copy (rows padded by 8 halves: conflict-free fragment loads)
// for the products. The gate math is the sequence kernel's, one thread per
// (row, hidden unit) pair in groups of H threads.
constexpr int kGruMmaRows = 16;
constexpr int kGruMmaWarps = kGruThreads / 32;
constexpr int kGruMmaTilesPerWarp = (3 * kGruMaxHidden / 8 + kGruMmaWarps - 1) / kGruMmaWarps;
constexpr int kGruMmaKTiles = kGruMaxHidden / 16;
constexpr int kGruMmaRowsPerThread = (kGruMmaRows + 2) / 3;  // groups of H >= 3 when H <= 128

size_t GruSequenceMmaSmem(int64_t H) {
  return sizeof(float) * static_cast<size_t>(kGruMmaRows * (H + 3 * H)) +
         sizeof(__half) * static_cast<size_t>(kGruMmaRows * (H + 8));
}

__device__ inline uint32_t PackHalf2(float lo, float hi) {
  const __half2 v = __halves2half2(__float2half_rn(lo), __float2half_rn(hi));
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Shared by the tensor-core kernels. Warp `warp` owns the 8-column tiles warp,
// warp + 12, ... of `ntiles`; column n of its tiles is R's row row_of(n).
// The B fragments (column-major 16 x 8 per tile): column n of tile (t, k) is
// gate row row_of(t * 8 + gid), rows k * 16 + 2 * tig (+1, +8, +9). R float32
// is rounded to FP16 pairs; R float16 (r_half) already holds each pair as one
// 32-bit word: half the bytes and no conversion at every launch.
template <int kTiles, typename RowOf>
__device__ void GruLoadRFragments(const void* __restrict__ R, bool r_half, int H, int ntiles,
                                  int ktiles, int warp, int gid, int tig, RowOf row_of,
                                  uint32_t (&bf)[kTiles][kGruMmaKTiles][2]) {
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    const int nt = warp + kGruMmaWarps * i;
#pragma unroll
    for (int kt = 0; kt < kGruMmaKTiles; ++kt) {
      bf[i][kt][0] = bf[i][kt][1] = 0u;
      if (nt < ntiles && kt < ktiles) {
        const int64_t at = static_cast<int64_t>(row_of(nt * 8 + gid)) * H + kt * 16 + 2 * tig;
        if (r_half) {
          // H % 16 == 0: the pairs are 4-byte aligned.
          const __half* rr = static_cast<const __half*>(R) + at;
          bf[i][kt][0] = __ldg(reinterpret_cast<const unsigned int*>(rr));
          bf[i][kt][1] = __ldg(reinterpret_cast<const unsigned int*>(rr + 8));
        } else {
          const float* rr = static_cast<const float*>(R) + at;
          bf[i][kt][0] = PackHalf2(__ldg(rr), __ldg(rr + 1));
          bf[i][kt][1] = PackHalf2(__ldg(rr + 8), __ldg(rr + 9));
        }
      }
    }
  }
}

// h * R^T of the warp's tiles for the 16 rows of ha (FP16, row stride S) into
// hr (float32, row stride `stride`): per k-tile the A fragment once, then one
// mma.m16n8k16 per tile.
template <int kTiles>
__device__ void GruTileProducts(const __half* ha, int S, int ntiles, int ktiles, int warp, int gid, int tig,
                                const uint32_t (&bf)[kTiles][kGruMmaKTiles][2], float* hr, int stride) {
  float acc[kTiles][4];
#pragma unroll
  for (int i = 0; i < kTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
#pragma unroll
  for (int kt = 0; kt < kGruMmaKTiles; ++kt) {
    if (kt < ktiles) {
      const __half* a_lo = ha + gid * S + kt * 16 + 2 * tig;
      const __half* a_hi = a_lo + 8 * S;
      const uint32_t a0 = *reinterpret_cast<const uint32_t*>(a_lo);
      const uint32_t a1 = *reinterpret_cast<const uint32_t*>(a_hi);
      const uint32_t a2 = *reinterpret_cast<const uint32_t*>(a_lo + 8);
      const uint32_t a3 = *reinterpret_cast<const uint32_t*>(a_hi + 8);
#pragma unroll
      for (int i = 0; i < kTiles; ++i) {
        if (warp + kGruMmaWarps * i < ntiles)
          asm volatile(
              "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
              "{%8,%9}, {%0,%1,%2,%3};\n"
              : "+f"(acc[i][0]), "+f"(acc[i][1]), "+f"(acc[i][2]), "+f"(acc[i][3])
              : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(bf[i][kt][0]), "r"(bf[i][kt][1]));
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    const int nt = warp + kGruMmaWarps * i;
    if (nt < ntiles) {
      const int col = nt * 8 + 2 * tig;
      hr[gid * stride + col] = acc[i][0];
      hr[gid * stride + col + 1] = acc[i][1];
      hr[(gid + 8) * stride + col] = acc[i][2];
      hr[(gid + 8) * stride + col + 1] = acc[i][3];
    }
  }
}

__global__ void __launch_bounds__(kGruThreads, 1)
    GruSequenceMmaKernel(GruStepArgs a, const void* __restrict__ R) {
  extern __shared__ __align__(16) float sm[];
  const int H = static_cast<int>(a.g.hidden), G = 3 * H, S = H + 8;
  const int ntiles = G / 8, ktiles = H / 16;
  const int64_t b0 = static_cast<int64_t>(blockIdx.x) * kGruMmaRows;
  const int rows = static_cast<int>(min(static_cast<int64_t>(kGruMmaRows), a.g.batch - b0));
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  float* hs = sm;                                                 // h [16][H], float32
  float* hr = hs + kGruMmaRows * H;                               // h * R^T [16][G]
  __half* hh = reinterpret_cast<__half*>(hr + kGruMmaRows * G);   // h [16][S], FP16
  uint32_t bf[kGruMmaTilesPerWarp][kGruMmaKTiles][2];  // this warp's R fragments
  GruLoadRFragments(R, a.r_half, H, ntiles, ktiles, warp, gid, tig, [](int n) { return n; }, bf);
  const int groups = kGruThreads / H, group = tid / H, j = tid % H;
  const bool updates = group < groups;
  GruUnitRows<kGruMmaRowsPerThread> unit;
  if (updates) unit.LoadBiases(a, j);
  for (int i = tid; i < kGruMmaRows * H; i += blockDim.x) {
    const int r = i / H;
    const float v = r < rows ? a.StartH(b0 + r, i % H) : 0.f;
    hs[i] = v;
    hh[r * S + i % H] = __float2half_rn(v);
  }
  __syncthreads();
  for (int64_t s = 0; s < a.g.seq; ++s) {
    unit.LoadStep(a, s, b0, rows, group, groups, j, updates);
    GruTileProducts(hh, S, ntiles, ktiles, warp, gid, tig, bf, hr, G);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kGruMmaRowsPerThread; ++k) {
      if (unit.t[k] < 0) continue;
      const int r = group + groups * k;
      const int i = r * H + j;
      const float h_new = unit.Update(a, k, hr + r * G + j, hs[i], H);
      hs[i] = h_new;  // only this thread touches (r, j) until the next barrier
      hh[r * S + j] = __float2half_rn(h_new);
      if (a.y) a.StoreY(a.g.YOffset(unit.t[k], a.d, b0 + r) + j, h_new);
    }
    __syncthreads();
  }
  for (int i = tid; i < rows * H; i += blockDim.x) a.EndH(b0 + i / H, i % H, hs[i]);
}

// The tensor-core sequence kernel split over a thread-block cluster of kC
// blocks (sm_90): block c of a cluster owns hidden units [c * U, (c + 1) * U)
// (U = H / kC) of the cluster's 16 batch rows: their z, r and h gate columns of
// h * R^T (3U / 8 tiles of mma.m16n8k16, R's fragments in registers), their
// gate math and their float32 state. Each step every block writes its units'
// new h, as FP16, into the A-operand buffer of every block of the cluster
// (distributed shared memory, double-buffered so one cluster barrier per step
// orders both the writes and the next step's reads). A step's chain of
// dependent products and the gate math per thread are kC times shorter than in
// GruSequenceMmaKernel, and kC times as many SMs share a batch.
constexpr int kGruClusterMaxC = 4;

size_t GruSequenceClusterSmem(int64_t H, int cluster) {
  const int64_t U = H / cluster;
  return sizeof(float) * static_cast<size_t>(kGruMmaRows * (U + 3 * U)) +
         sizeof(__half) * static_cast<size_t>(2 * kGruMmaRows * (H + 8));
}

template <int kC>
__global__ void __launch_bounds__(kGruThreads, 1)
    GruSequenceClusterKernel(GruStepArgs a, const void* __restrict__ R) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  constexpr int kTilesPerWarp = (3 * kGruMaxHidden / kC / 8 + kGruMmaWarps - 1) / kGruMmaWarps;
  constexpr int kRowsPerThread = (kGruMmaRows + 3 * kC - 1) / (3 * kC);  // groups >= 3 kC
  extern __shared__ __align__(16) float sm[];
  const int H = static_cast<int>(a.g.hidden), U = H / kC, S = H + 8;
  const int ntiles = 3 * U / 8, ktiles = H / 16;
  const int c = static_cast<int>(cluster.block_rank());
  const int64_t b0 = static_cast<int64_t>(blockIdx.x / kC) * kGruMmaRows;
  const int rows = static_cast<int>(min(static_cast<int64_t>(kGruMmaRows), a.g.batch - b0));
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  float* hs = sm;                                                // own units' h [16][U], float32
  float* hr = hs + kGruMmaRows * U;                              // own gates' h * R^T [16][3U]
  __half* hh = reinterpret_cast<__half*>(hr + kGruMmaRows * 3 * U);  // h [2][16][S], FP16
  // Local column n (gate n / U, unit c * U + n % U) is R's row g * H + c * U + n % U;
  // U % 8 == 0, so a tile never straddles two gates.
  uint32_t bf[kTilesPerWarp][kGruMmaKTiles][2];
  GruLoadRFragments(R, a.r_half, H, ntiles, ktiles, warp, gid, tig,
                    [H, U, c](int n) { return n / U * H + c * U + n % U; }, bf);
  const int groups = kGruThreads / U, group = tid / U, jj = tid % U, j = c * U + jj;
  const bool updates = group < groups;
  GruUnitRows<kRowsPerThread> unit;
  if (updates) unit.LoadBiases(a, j);
  for (int i = tid; i < kGruMmaRows * H; i += blockDim.x) {
    const int r = i / H, col = i % H;
    const float v = r < rows ? a.StartH(b0 + r, col) : 0.f;
    hh[r * S + col] = __float2half_rn(v);
    if (col >= c * U && col < (c + 1) * U) hs[r * U + col - c * U] = v;
  }
  __half* peer_hh[kC];
#pragma unroll
  for (int p = 0; p < kC; ++p) peer_hh[p] = cluster.map_shared_rank(hh, p);
  cluster.sync();  // every block started and initialized before any remote write
  for (int64_t s = 0; s < a.g.seq; ++s) {
    const int cur = static_cast<int>(s & 1), nxt = cur ^ 1;
    unit.LoadStep(a, s, b0, rows, group, groups, j, updates);
    GruTileProducts(hh + cur * kGruMmaRows * S, S, ntiles, ktiles, warp, gid, tig, bf, hr, 3 * U);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kRowsPerThread; ++k) {
      const int r = group + groups * k;
      if (!updates || r >= kGruMmaRows) continue;
      const int i = r * U + jj;
      float h = hs[i];  // rows past the batch or past their sequence keep theirs
      if (unit.t[k] >= 0) {
        h = unit.Update(a, k, hr + r * 3 * U + jj, h, U);
        hs[i] = h;
        if (a.y) a.StoreY(a.g.YOffset(unit.t[k], a.d, b0 + r) + j, h);
      }
      const __half hv = __float2half_rn(h);
#pragma unroll
      for (int p = 0; p < kC; ++p) peer_hh[p][nxt * kGruMmaRows * S + r * S + j] = hv;
    }
    cluster.sync();  // the next step reads every block's units; no block leaves while peers write
  }
  for (int i = tid; i < rows * U; i += blockDim.x) a.EndH(b0 + i / U, c * U + i % U, hs[i]);
}

// Clusters of kC blocks of the kernel that fit on the device at once.
template <int kC>
int GruClustersResident(size_t smem) {
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = kC;
  attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
  config.gridDim = dim3(kC * 64);
  config.blockDim = dim3(kGruThreads);
  config.dynamicSmemBytes = smem;
  config.attrs = &attr;
  config.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, GruSequenceClusterKernel<kC>, &config) != cudaSuccess) {
    cudaGetLastError();  // no clusters on this device: clear the error, use no split
    return 0;
  }
  return clusters;
}

// GruSequenceClusterSize: the largest cluster (4, 2) whose clusters of one
// 16-row tile each fit at once, with H % (8 * cluster) == 0; else 1.
int ClusterSize(int64_t batch, int64_t H) {
  int cap = kGruClusterMaxC;
  if (const char* env = std::getenv("KAIWU_GRU_CLUSTER")) cap = std::atoi(env);
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess || major < 9)
    return 1;
  const int64_t tiles = (batch + kGruMmaRows - 1) / kGruMmaRows;
  if (cap >= 4 && H % 32 == 0 && tiles <= GruClustersResident<4>(GruSequenceClusterSmem(H, 4))) return 4;
  if (cap >= 2 && H % 16 == 0 && tiles <= GruClustersResident<2>(GruSequenceClusterSmem(H, 2))) return 2;
  return 1;
}

void LaunchGruSequenceCluster(int cluster, int64_t batch, size_t smem, cudaStream_t stream,
                              const GruStepArgs& args, const void* r) {
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(cluster);
  attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
  config.gridDim = dim3(static_cast<unsigned>(cluster * ((batch + kGruMmaRows - 1) / kGruMmaRows)));
  config.blockDim = dim3(kGruThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  if (cluster == 4) {
    CheckCuda(cudaLaunchKernelEx(&config, GruSequenceClusterKernel<4>, args, r), "GRU sequence kernel (cluster of 4)");
  } else {
    CheckCuda(cudaLaunchKernelEx(&config, GruSequenceClusterKernel<2>, args, r), "GRU sequence kernel (cluster of 2)");
  }
}

// A float16 R widened for the paths that read float32 R.
__global__ void WidenHalfKernel(const __half* __restrict__ in, float* __restrict__ out, int64_t n) {
  KAIWU_CUDA_LOOP(i, n) out[i] = __half2float(in[i]);
}

class GruKernel : public RnnKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    linear_before_reset_ = PrepareRnn(ctx, 3, {"Sigmoid", "Tanh"}).linear_before_reset;
    // Up to this batch a sequence kernel runs: the float32 one up to 512
    // (bench/results/h100/gru_sequence_ab.md: faster at 1-256, slower at 1024), the tensor-core
    // one of half sessions (h * R^T with FP16 operands, as the session's other GEMMs) at every
    // batch. KAIWU_GRU_SEQUENCE_MAX_BATCH sets the limit of both (0: never).
    int64_t max_batch = 512, max_batch_mma = std::numeric_limits<int64_t>::max();
    if (const char* env = std::getenv("KAIWU_GRU_SEQUENCE_MAX_BATCH")) max_batch = max_batch_mma = std::atoll(env);
    const bool small_hidden = linear_before_reset_ && g_.hidden > 0 && g_.hidden <= kGruMaxHidden;
    sequence_mma_ = small_hidden && tf32_ && g_.hidden % 16 == 0 && g_.batch <= max_batch_mma;
    sequence_kernel_ = sequence_mma_ || (small_hidden && g_.hidden % 4 == 0 && g_.batch <= max_batch);
    sequence_rows_ = sequence_mma_ ? kGruMmaRows : sequence_kernel_ ? GruSequenceRows(g_.batch) : 0;
    // On tensor cores, split over a cluster of blocks where they fit at once.
    sequence_cluster_ = sequence_mma_ ? ClusterSize(g_.batch, g_.hidden) : 1;
    sequence_smem_ = sequence_cluster_ > 1 ? GruSequenceClusterSmem(g_.hidden, sequence_cluster_)
                     : sequence_mma_       ? GruSequenceMmaSmem(g_.hidden)
                                           : GruSequenceSmem(g_.hidden, sequence_rows_);
    // A float16 R (fp16 sessions, passes/mixed_precision.cc): the tensor-core
    // kernels read it as is; the other paths read it widened into scratch.
    r_half_ = ctx.in(2).dtype == DType::kFloat16;
    if (r_half_) {
      r_scratch_at_ = (ctx.scratch_bytes + 255) / 256 * 256;
      const int64_t r_floats = g_.dirs * 3 * g_.hidden * g_.hidden;
      ctx.scratch_bytes = r_scratch_at_ + sizeof(float) * static_cast<size_t>(r_floats);
    }
  }

  void Run(const KernelIO& io) const override {
    const DeviceContext& dev = Dev(io);
    const int64_t H = g_.hidden, G = 3 * H, batch = g_.batch;
    if (batch == 0 || H == 0) return;  // every output is empty
    const float* bias = Input(io, 3);
    const float* init_h = Input(io, 5);
    GruStepArgs args;
    BindRun(io, &args, "GRU zero Y");
    args.linear_before_reset = linear_before_reset_;
    // R as the tensor-core kernels read it (float32, or float16 as the node has
    // it: H % 16 == 0 keeps every direction's start 16-byte aligned), and as
    // float32 for the other paths (a float16 R widened into scratch first).
    const bool r_aligned = (reinterpret_cast<uintptr_t>(io.inputs[2]) & 15) == 0;
    const bool widen = r_half_ && (!sequence_mma_ || !r_aligned);
    args.r_half = r_half_ && !widen;
    const float* r = r_half_ ? nullptr : Input(io, 2);
    if (widen) {
      float* wide = reinterpret_cast<float*>(static_cast<char*>(io.scratch) + r_scratch_at_);
      const int64_t n = g_.dirs * G * H;
      const auto* r16 = static_cast<const __half*>(io.inputs[2]);
      WidenHalfKernel<<<GridFor(n), kBlock, 0, dev.stream>>>(r16, wide, n);
      CheckLaunch("GRU R widening");
      r = wide;
    }
    args.rh = scratch_.state(io.scratch, 1);
    float* xw = scratch_.xw(io.scratch);  // written by the X * W^T GEMM, read by the steps
    float* h = args.h;
    float* gates = args.gates;
    const unsigned grid = GridFor(batch * H);
    for (int64_t d = 0; d < g_.dirs; ++d) {
      ProjectInput(dev, io, d, xw);
      args.d = d;
      args.bias = bias ? bias + d * 2 * G : nullptr;
      // rd: float32 R of direction d (null when only the tensor-core kernels read R).
      const float* rd = r ? r + d * G * H : nullptr;
      const void* rd_mma = rd;
      if (args.r_half) rd_mma = static_cast<const __half*>(io.inputs[2]) + d * G * H;
      if (sequence_kernel_ && (reinterpret_cast<uintptr_t>(rd_mma) & 15) == 0) {
        // The sequence kernels read initial_h and write Y_h themselves.
        args.load_init = args.store_final = fold_states_;
        if (!fold_states_) RnnLoadStates(dev, g_, d, init_h, h, nullptr, nullptr);
        if (sequence_cluster_ > 1) {
          LaunchGruSequenceCluster(sequence_cluster_, batch, sequence_smem_, dev.stream, args,
                                   rd_mma);
        } else if (sequence_mma_) {
          GruSequenceMmaKernel<<<static_cast<unsigned>((batch + kGruMmaRows - 1) / kGruMmaRows),
                                 kGruThreads, sequence_smem_, dev.stream>>>(args, rd_mma);
          CheckLaunch("GRU sequence kernel (tensor cores)");
        } else {
          LaunchGruSequence(sequence_rows_, batch, sequence_smem_, dev.stream, args, rd);
        }
        if (!fold_states_) RnnStoreStates(dev, g_, d, h, Output(io, 1), nullptr, nullptr);
        continue;
      }
      const bool folded = FoldStepStates(io, &args);
      if (!folded) RnnLoadStates(dev, g_, d, init_h, h, nullptr, nullptr);
      for (int64_t s = 0; s < g_.seq; ++s) {
        args.s = s;
        // Step 0 of a folded run reads h from initial_h.
        const bool first = folded && s == 0;
        const float* hp = first ? init_h + InitOffset(d) : h;
        const int64_t ldh = first ? InitStride() : H;
        if (linear_before_reset_) {
          RowMajorSgemm(dev, false, true, batch, G, H, 1.f, hp, ldh, rd, H, gates, G, tf32_);
        } else {
          RowMajorSgemm(dev, false, true, batch, 2 * H, H, 1.f, hp, ldh, rd, H, gates, G, tf32_);
          GruResetKernel<<<grid, kBlock, 0, dev.stream>>>(args);
          CheckLaunch("GRU reset kernel");
          RowMajorSgemm(dev, false, true, batch, H, H, 1.f, args.rh, H, rd + 2 * H * H, H, gates + 2 * H,
                        G, tf32_);
        }
        GruStepKernel<<<grid, kBlock, 0, dev.stream>>>(args);
        CheckLaunch("GRU step kernel");
      }
      if (!folded) RnnStoreStates(dev, g_, d, h, Output(io, 1), nullptr, nullptr);
    }
  }

 private:
  bool linear_before_reset_ = false;
  bool r_half_ = false;        // R is float16
  size_t r_scratch_at_ = 0;    // where a widened float16 R goes in scratch
  bool sequence_kernel_ = false;  // GruSequenceKernel runs the steps
  bool sequence_mma_ = false;     // ... GruSequenceMmaKernel, on tensor cores
  int sequence_rows_ = 0;         // its batch rows per block
  int sequence_cluster_ = 1;      // > 1: GruSequenceClusterKernel with clusters of this many blocks
  size_t sequence_smem_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> MakeGruKernel(const Node&) { return std::make_unique<GruKernel>(); }

int GruSequenceClusterSize(int64_t batch, int64_t hidden) { return ClusterSize(batch, hidden); }

}  // namespace cuda
}  // namespace kaiwu
