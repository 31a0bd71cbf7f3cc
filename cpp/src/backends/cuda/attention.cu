// FusedAttention (ops/linalg.h FusedAttentionParams) on CUDA, two kernels:
//
// AttentionMmaKernel (float16 / bfloat16, keys, head and value dims <= 128):
// a block per batch item (and group of 64 query rows), its K and V staged in
// shared memory once (V transposed), a warp per 16 query rows. The warp makes
// its 16 x M scores with mma.sync m16n8k16 (float accumulators), scales them,
// adds the mask, takes the row max and sum across the four lanes that hold a
// row, and feeds the probabilities from the same registers, rounded to T, as
// the A operand of P x V (the accumulator layout of two 8-key tiles is the A
// layout of one 16-key step), dividing by the sum at the end. Scores and
// probabilities never reach memory; a policy's attention over a few dozen
// units is one launch of a few microseconds instead of a batched GEMM, a
// broadcast Add, a softmax and a second batched GEMM.
//
// AttentionRowsKernel (float32, and larger shapes): one warp per output row
// (batch item, query i). The warp walks the keys 32 at a time, lane j scoring
// key j (Q's row . K's column, + mask) in float, and keeps an online softmax
// (running max and sum, the accumulators rescaled when the max grows) while it
// accumulates p_j * V[j, c] for 32 * kAcc output columns a pass; the row is
// divided by the sum once at the end.
//
// Both read every input in place through the params' strides (broadcast batch
// dims, a mask of [.., 1, M], a transposed K) and write Y through its strides
// (a Transpose folded into the node). KAIWU_ATTENTION_MMA=0 (read at
// plan time) runs the rows kernel for every shape.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/gemm_util.h"
#include "backends/cuda/half_util.cuh"
#include "ops/linalg.h"

namespace kaiwu {
namespace cuda {
namespace {

constexpr int kMaxDims = FusedAttentionParams::kMaxBatchDims;

// Y's batch dims and each operand's element strides over them (0: broadcast).
struct BatchMap {
  int rank = 0;
  int64_t dims[kMaxDims];
  int64_t q[kMaxDims], k[kMaxDims], v[kMaxDims], mask[kMaxDims], y[kMaxDims];

  static BatchMap From(const FusedAttentionParams& p) {
    BatchMap m{};
    m.rank = static_cast<int>(p.batch.size());
    for (int b = 0; b < m.rank; ++b) {
      m.dims[b] = p.batch[b];
      m.q[b] = p.q_batch[b];
      m.k[b] = p.k_batch[b];
      m.v[b] = p.v_batch[b];
      m.mask[b] = p.mask_batch[b];
      m.y[b] = p.y_batch[b];
    }
    return m;
  }

  // Where batch item `item` starts in Q, K, V, the mask and Y.
  __device__ void Offsets(int64_t item, int64_t* qo, int64_t* ko, int64_t* vo, int64_t* mo, int64_t* yo) const {
    *qo = *ko = *vo = *mo = *yo = 0;
    for (int b = rank - 1; b >= 0; --b) {
      const int64_t idx = item % dims[b];
      item /= dims[b];
      *qo += idx * q[b];
      *ko += idx * k[b];
      *vo += idx * v[b];
      *mo += idx * mask[b];
      *yo += idx * y[b];
    }
  }
};

struct AttentionArgs {
  BatchMap batch;
  int64_t rows, n, m, d, dv;
  int64_t q_row, k_key, k_inner, v_key, mask_row, mask_key, y_row;
  float scale;
};

template <typename T, int kAcc>
__global__ void __launch_bounds__(256) AttentionRowsKernel(AttentionArgs a, const T* __restrict__ q,
                                                           const T* __restrict__ k, const T* __restrict__ v,
                                                           const T* __restrict__ mask, T* __restrict__ y) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; row < a.rows;
       row += warps) {
    const int64_t item = row / a.n, i = row - item * a.n;
    int64_t qo, ko, vo, mo, yo;
    a.batch.Offsets(item, &qo, &ko, &vo, &mo, &yo);
    const T* qr = q + qo + i * a.q_row;
    const T* mr = mask ? mask + mo + i * a.mask_row : nullptr;
    T* yr = y + yo + i * a.y_row;
    for (int64_t c0 = 0; c0 < a.dv; c0 += 32 * kAcc) {
      float run_max = -INFINITY, run_sum = 0.f;
      float acc[kAcc];
#pragma unroll
      for (int u = 0; u < kAcc; ++u) acc[u] = 0.f;
      for (int64_t j0 = 0; j0 < a.m; j0 += 32) {
        const int64_t j = j0 + lane;
        float s = -INFINITY;
        if (j < a.m) {
          const T* kc = k + ko + j * a.k_key;
          s = 0.f;
          for (int64_t t = 0; t < a.d; ++t) s += Load(qr[t]) * Load(kc[t * a.k_inner]);
          s *= a.scale;
          if (mr) s += Load(mr[j * a.mask_key]);
        }
        float chunk_max = s;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, o));
        const float new_max = fmaxf(run_max, chunk_max);
        // Until some score is finite the max is -inf: nothing accumulated yet, nothing to rescale.
        const float rescale = run_max == -INFINITY ? 0.f : expf(run_max - new_max);
        const float p = s == -INFINITY ? 0.f : expf(s - new_max);
        float chunk_sum = p;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) chunk_sum += __shfl_xor_sync(0xffffffffu, chunk_sum, o);
        run_sum = run_sum * rescale + chunk_sum;
#pragma unroll
        for (int u = 0; u < kAcc; ++u) acc[u] *= rescale;
        const int keys = static_cast<int>(a.m - j0 < 32 ? a.m - j0 : 32);
        for (int jj = 0; jj < keys; ++jj) {
          const float pj = __shfl_sync(0xffffffffu, p, jj);
          const T* vr = v + vo + (j0 + jj) * a.v_key;
#pragma unroll
          for (int u = 0; u < kAcc; ++u) {
            const int64_t c = c0 + lane + 32 * u;
            if (c < a.dv) acc[u] += pj * Load(vr[c]);
          }
        }
        run_max = new_max;
      }
      // A row whose every score is -inf: 0 / 0, NaN, as Softmax gives there.
      const float inv = 1.f / run_sum;
#pragma unroll
      for (int u = 0; u < kAcc; ++u) {
        const int64_t c = c0 + lane + 32 * u;
        if (c < a.dv) yr[c] = Store<T>(run_sum > 0.f ? acc[u] * inv : NAN);
      }
    }
  }
}

// The mma kernel's tile sizes: 16 query rows a warp, at most kMmaWarps warps a
// block, keys / head dim / value dim padded to 16 and at most kMmaMax.
constexpr int kMmaWarps = 4;
constexpr int kMmaMax = 128;
constexpr int kSmemPad = 8;  // elements added to each staged row: conflict-free fragment reads

struct MmaArgs {
  BatchMap batch;
  int n, m, d, dv, mpad, dpad, dvpad;
  int64_t q_row, q_inner, k_key, k_inner, v_key, mask_row, mask_key, y_row;
  float scale;
  bool vec_q, vec_k, vec_v;  // 16-byte loads: inner stride 1, rows and item offsets multiples of 8
};

// dst[r * ld + c] (or dst[c * ld + r] with kTransposed) = src[r * s_row + c * s_col]
// for r < rows_pad, c < cols_pad, zero outside rows x cols. With vec, src rows
// are read 8 elements at a time (cols a multiple of 8, 16-byte aligned rows).
template <typename T, bool kTransposed>
__device__ __forceinline__ void StageTile(T* dst, int ld, const T* __restrict__ src, int rows, int cols, int rows_pad,
                                          int cols_pad, int64_t s_row, int64_t s_col, bool vec, int tid,
                                          int threads) {
  const T zero = Store<T>(0.f);
  if (vec) {
    const int chunks = cols_pad / 8;
    for (int i = tid; i < rows_pad * chunks; i += threads) {
      const int r = i / chunks, c = (i - r * chunks) * 8;
      uint4 x = make_uint4(0u, 0u, 0u, 0u);
      if (r < rows && c < cols) x = __ldg(reinterpret_cast<const uint4*>(src + r * s_row + c));
      if constexpr (kTransposed) {
        const T* e = reinterpret_cast<const T*>(&x);
#pragma unroll
        for (int u = 0; u < 8; ++u) dst[(c + u) * ld + r] = e[u];
      } else {
        *reinterpret_cast<uint4*>(dst + r * ld + c) = x;
      }
    }
    return;
  }
  for (int i = tid; i < rows_pad * cols_pad; i += threads) {
    const int r = i / cols_pad, c = i - r * cols_pad;
    const T x = r < rows && c < cols ? src[r * s_row + c * s_col] : zero;
    dst[kTransposed ? c * ld + r : r * ld + c] = x;
  }
}

template <typename T>
__device__ __forceinline__ uint32_t PackPair(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    memcpy(&r, &h, 4);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    memcpy(&r, &h, 4);
  }
  return r;
}

__device__ __forceinline__ uint32_t Word(const void* p) { return *reinterpret_cast<const uint32_t*>(p); }

// kMT: 16-key tiles held in registers (mpad <= 16 * kMT); kNT: 8-column tiles
// of the output (dvpad <= 8 * kNT). Tiles past mpad / dvpad are skipped.
template <typename T, int kMT, int kNT>
__global__ void __launch_bounds__(32 * kMmaWarps) AttentionMmaKernel(MmaArgs a, const T* __restrict__ q,
                                                                     const T* __restrict__ k,
                                                                     const T* __restrict__ v,
                                                                     const T* __restrict__ mask, T* __restrict__ y) {
  extern __shared__ uint4 attention_smem[];
  const int kld = a.dpad + kSmemPad, vld = a.mpad + kSmemPad;
  T* ks = reinterpret_cast<T*>(attention_smem);  // [mpad][kld]: K's rows (keys)
  T* vt = ks + a.mpad * kld;                     // [dvpad][vld]: V transposed
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int warps = static_cast<int>(blockDim.x / 32);
  T* qs = vt + a.dvpad * vld + warp * 16 * kld;  // this warp's [16][kld] rows of Q

  const int64_t item = blockIdx.x;
  int64_t qo, ko, vo, mo, yo;
  a.batch.Offsets(item, &qo, &ko, &vo, &mo, &yo);
  const int row0 = (static_cast<int>(blockIdx.y) * warps + warp) * 16;
  StageTile<T, false>(ks, kld, k + ko, a.m, a.d, a.mpad, a.dpad, a.k_key, a.k_inner, a.vec_k,
                      static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
  StageTile<T, true>(vt, vld, v + vo, a.m, a.dv, a.mpad, a.dvpad, a.v_key, 1, a.vec_v,
                     static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
  const int rows = a.n - row0 < 16 ? a.n - row0 : 16;
  if (rows > 0)
    StageTile<T, false>(qs, kld, q + qo + row0 * a.q_row, rows, a.d, 16, a.dpad, a.q_row, a.q_inner, a.vec_q,
                        lane, 32);
  __syncthreads();
  if (rows <= 0) return;

  const int g = lane >> 2, t = lane & 3;
  // Scores: s[j] is the 16 x 8 tile of keys 8j..8j+7 (rows g and g + 8, keys 2t and 2t + 1).
  float s[2 * kMT][4];
#pragma unroll
  for (int j = 0; j < 2 * kMT; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
  for (int kc = 0; kc < a.dpad; kc += 16) {
    const T* qa = qs + g * kld + kc + 2 * t;
    const uint32_t a0 = Word(qa), a1 = Word(qa + 8 * kld), a2 = Word(qa + 8), a3 = Word(qa + 8 * kld + 8);
#pragma unroll
    for (int j = 0; j < 2 * kMT; ++j) {
      if (j * 8 >= a.mpad) break;
      const T* kb = ks + (j * 8 + g) * kld + kc + 2 * t;
      Mma16816<T>(s[j], a0, a1, a2, a3, Word(kb), Word(kb + 8));
    }
  }
  // Scale, mask (rows past n read none), the max of each of the two rows.
  const int r_lo = row0 + g, r_hi = row0 + g + 8;
  const T* m_lo = mask && r_lo < a.n ? mask + mo + r_lo * a.mask_row : nullptr;
  const T* m_hi = mask && r_hi < a.n ? mask + mo + r_hi * a.mask_row : nullptr;
  float max_lo = -INFINITY, max_hi = -INFINITY;
#pragma unroll
  for (int j = 0; j < 2 * kMT; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = j * 8 + 2 * t + (e & 1);
      float x = -INFINITY;
      if (key < a.m) {
        x = s[j][e] * a.scale;
        const T* mr = e < 2 ? m_lo : m_hi;
        if (mr) x += Load(mr[key * a.mask_key]);
      }
      s[j][e] = x;
      if (e < 2) max_lo = fmaxf(max_lo, x);
      else max_hi = fmaxf(max_hi, x);
    }
  }
#pragma unroll
  for (int o = 1; o <= 2; o <<= 1) {
    max_lo = fmaxf(max_lo, __shfl_xor_sync(0xffffffffu, max_lo, o));
    max_hi = fmaxf(max_hi, __shfl_xor_sync(0xffffffffu, max_hi, o));
  }
  float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
  for (int j = 0; j < 2 * kMT; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float mx = e < 2 ? max_lo : max_hi;
      const float p = s[j][e] == -INFINITY ? 0.f : __expf(s[j][e] - mx);
      s[j][e] = p;
      if (e < 2) sum_lo += p;
      else sum_hi += p;
    }
  }
#pragma unroll
  for (int o = 1; o <= 2; o <<= 1) {
    sum_lo += __shfl_xor_sync(0xffffffffu, sum_lo, o);
    sum_hi += __shfl_xor_sync(0xffffffffu, sum_hi, o);
  }
  // O = P x V, 16 keys a step: tiles 2kk and 2kk + 1 of P are one A fragment.
  float acc[kNT][4];
#pragma unroll
  for (int c = 0; c < kNT; ++c) acc[c][0] = acc[c][1] = acc[c][2] = acc[c][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < kMT; ++kk) {
    if (kk * 16 >= a.mpad) break;
    const uint32_t a0 = PackPair<T>(s[2 * kk][0], s[2 * kk][1]), a1 = PackPair<T>(s[2 * kk][2], s[2 * kk][3]);
    const uint32_t a2 = PackPair<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    const uint32_t a3 = PackPair<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
    for (int c = 0; c < kNT; ++c) {
      if (c * 8 >= a.dvpad) break;
      const T* vb = vt + (c * 8 + g) * vld + kk * 16 + 2 * t;
      Mma16816<T>(acc[c], a0, a1, a2, a3, Word(vb), Word(vb + 8));
    }
  }
  // A row whose every score is -inf: 0 / 0, NaN, as Softmax gives there.
  const float inv_lo = sum_lo > 0.f ? 1.f / sum_lo : NAN, inv_hi = sum_hi > 0.f ? 1.f / sum_hi : NAN;
  T* y_item = y + yo;
#pragma unroll
  for (int c = 0; c < kNT; ++c) {
    const int col = c * 8 + 2 * t;
    if (c * 8 >= a.dvpad || col >= a.dv) continue;
    const bool pair = col + 1 < a.dv;
    if (r_lo < a.n) {
      T* yr = y_item + r_lo * a.y_row + col;
      yr[0] = Store<T>(acc[c][0] * inv_lo);
      if (pair) yr[1] = Store<T>(acc[c][1] * inv_lo);
    }
    if (r_hi < a.n) {
      T* yr = y_item + r_hi * a.y_row + col;
      yr[0] = Store<T>(acc[c][2] * inv_hi);
      if (pair) yr[1] = Store<T>(acc[c][3] * inv_hi);
    }
  }
}

template <typename T>
constexpr bool kHalfType = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

int64_t RoundUp16(int64_t x) { return (x + 15) / 16 * 16; }

template <typename T>
class AttentionKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    if (args_.rows == 0 || args_.dv == 0) return;
    const T* q = static_cast<const T*>(io.inputs[inputs_[0]]) + offsets_[0];
    const T* k = static_cast<const T*>(io.inputs[inputs_[1]]) + offsets_[1];
    const T* v = static_cast<const T*>(io.inputs[inputs_[2]]) + offsets_[2];
    const T* mask = has_mask_ ? static_cast<const T*>(io.inputs[3]) : nullptr;
    T* y = static_cast<T*>(io.outputs[0]);
    cudaStream_t s = Dev(io).stream;
    if constexpr (kHalfType<T>) {
      if (mma_fn_) {
        MmaArgs a = mma_;
        // 16-byte loads also need 16-byte aligned bases (views into a larger buffer may not be).
        const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
        a.vec_q = a.vec_q && aligned(q);
        a.vec_k = a.vec_k && aligned(k);
        a.vec_v = a.vec_v && aligned(v);
        const int warps = static_cast<int>(std::min<int64_t>(kMmaWarps, (a.n + 15) / 16));
        const dim3 grid(static_cast<unsigned>(items_),
                        static_cast<unsigned>((a.n + 16 * warps - 1) / (16 * warps)));
        reinterpret_cast<void (*)(MmaArgs, const T*, const T*, const T*, const T*, T*)>(mma_fn_)
            <<<grid, 32 * warps, smem_, s>>>(a, q, k, v, mask, y);
        CheckLaunch("FusedAttention kernel");
        return;
      }
    }
    constexpr int kWarps = 8;
    const int64_t want = (args_.rows + kWarps - 1) / kWarps;
    const unsigned grid = static_cast<unsigned>(want < 65535LL * 32 ? want : 65535LL * 32);
    if (args_.dv <= 32) {
      AttentionRowsKernel<T, 1><<<grid, 32 * kWarps, 0, s>>>(args_, q, k, v, mask, y);
    } else if (args_.dv <= 64) {
      AttentionRowsKernel<T, 2><<<grid, 32 * kWarps, 0, s>>>(args_, q, k, v, mask, y);
    } else {
      AttentionRowsKernel<T, 4><<<grid, 32 * kWarps, 0, s>>>(args_, q, k, v, mask, y);
    }
    CheckLaunch("FusedAttention kernel");
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const FusedAttentionParams& p = ctx.Params<FusedAttentionParams>();
    args_ = AttentionArgs{};
    args_.batch = BatchMap::From(p);
    args_.rows = NumElements(p.batch) * p.n;
    args_.n = p.n;
    args_.m = p.m;
    args_.d = p.d;
    args_.dv = p.dv;
    args_.q_row = p.q_row;
    args_.k_key = p.k_key;
    args_.k_inner = p.k_inner;
    args_.v_key = p.v_key;
    args_.mask_row = p.mask_row;
    args_.mask_key = p.mask_key;
    args_.y_row = p.y_row;
    args_.scale = p.scale;
    has_mask_ = p.has_mask;
    inputs_[0] = p.q_input;
    inputs_[1] = p.k_input;
    inputs_[2] = p.v_input;
    offsets_[0] = p.q_offset;
    offsets_[1] = p.k_offset;
    offsets_[2] = p.v_offset;
    items_ = NumElements(p.batch);
    mma_fn_ = nullptr;
    if constexpr (kHalfType<T>) PrepareMma(p);
  }

 private:
  // The tensor-core kernel where the shapes fit it (else the rows kernel).
  void PrepareMma(const FusedAttentionParams& p) {
    const char* env = std::getenv("KAIWU_ATTENTION_MMA");
    if (env && std::string(env) == "0") return;
    if (p.n < 1 || p.m < 1 || p.d < 1 || p.m > kMmaMax || p.d > kMmaMax || p.dv > kMmaMax ||
        items_ > 0x7fffffffLL || p.n > 65535LL * 16 * kMmaWarps)
      return;
    MmaArgs a{};
    a.batch = args_.batch;
    const auto vec_ok = [&](const std::vector<int64_t>& batch, int64_t row, int64_t inner, int64_t cols) {
      if (inner != 1 || cols % 8 != 0 || row % 8 != 0) return false;
      for (int64_t b : batch)
        if (b % 8 != 0) return false;
      return true;
    };
    a.n = static_cast<int>(p.n);
    a.m = static_cast<int>(p.m);
    a.d = static_cast<int>(p.d);
    a.dv = static_cast<int>(p.dv);
    a.mpad = static_cast<int>(RoundUp16(p.m));
    a.dpad = static_cast<int>(RoundUp16(p.d));
    a.dvpad = static_cast<int>(RoundUp16(p.dv));
    a.q_row = p.q_row;
    a.q_inner = p.q_inner;
    a.k_key = p.k_key;
    a.k_inner = p.k_inner;
    a.v_key = p.v_key;
    a.mask_row = p.mask_row;
    a.mask_key = p.mask_key;
    a.y_row = p.y_row;
    a.scale = p.scale;
    a.vec_q = vec_ok(p.q_batch, p.q_row, p.q_inner, p.d);
    a.vec_k = vec_ok(p.k_batch, p.k_key, p.k_inner, p.d);
    a.vec_v = vec_ok(p.v_batch, p.v_key, 1, p.dv);
    const int warps = static_cast<int>(std::min<int64_t>(kMmaWarps, (p.n + 15) / 16));
    const int64_t kld = a.dpad + kSmemPad, vld = a.mpad + kSmemPad;
    const int64_t bytes = (a.mpad * kld + a.dvpad * vld + warps * 16 * kld) * static_cast<int64_t>(sizeof(T));
    const void* fn = a.mpad <= 32 ? (a.dvpad <= 32 ? reinterpret_cast<const void*>(AttentionMmaKernel<T, 2, 4>)
                                                   : reinterpret_cast<const void*>(AttentionMmaKernel<T, 2, 16>))
                                  : (a.dvpad <= 32 ? reinterpret_cast<const void*>(AttentionMmaKernel<T, 8, 4>)
                                                   : reinterpret_cast<const void*>(AttentionMmaKernel<T, 8, 16>));
    // The limit is the function's, shared by every node: raise it, never lower it.
    cudaFuncAttributes attrs = {};
    cudaError_t e = cudaFuncGetAttributes(&attrs, fn);
    if (e == cudaSuccess && attrs.maxDynamicSharedSizeBytes < bytes)
      e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (e != cudaSuccess) {
      cudaGetLastError();  // clear a refused attribute: the rows kernel runs
      return;
    }
    mma_ = a;
    mma_fn_ = fn;
    smem_ = static_cast<size_t>(bytes);
  }

  AttentionArgs args_{};
  MmaArgs mma_{};
  const void* mma_fn_ = nullptr;
  size_t smem_ = 0;
  int64_t items_ = 0;
  int inputs_[3] = {0, 1, 2};       // the node inputs Q, K and V are read from
  int64_t offsets_[3] = {0, 0, 0};  // and where each starts
  bool has_mask_ = false;
};

}  // namespace

void RegisterAttentionKernel(KernelRegistry& r) {
  r.Register(OpId::kFusedAttention, DType::kFloat32, &MakeKernel<AttentionKernel<float>>);
  r.Register(OpId::kFusedAttention, DType::kFloat16, &MakeKernel<AttentionKernel<__half>>);
  r.Register(OpId::kFusedAttention, DType::kBFloat16, &MakeKernel<AttentionKernel<__nv_bfloat16>>);
}

}  // namespace cuda
}  // namespace kaiwu
