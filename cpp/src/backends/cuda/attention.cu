// FusedAttention (ops/linalg.h FusedAttentionParams) on CUDA: one warp per
// output row (batch item, query i). The warp walks the keys 32 at a time, lane
// j scoring key j (Q's row . K's column, + mask) in float, and keeps an online
// softmax (running max and sum, the accumulators rescaled when the max grows)
// while it accumulates p_j * V[j, c] for 32 * kAcc output columns a pass; the
// row is divided by the sum once at the end. Every input is read in place
// through the params' strides (broadcast batch dims, a mask of [.., 1, M], a
// transposed K), so the scores and probabilities never reach memory: the
// attention of a policy over a few dozen units or tokens is one launch instead
// of a batched GEMM, a broadcast Add, a softmax and a second batched GEMM.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/gemm_util.h"
#include "backends/cuda/half_util.cuh"
#include "ops/linalg.h"

namespace kaiwu {
namespace cuda {
namespace {

constexpr int kMaxDims = FusedAttentionParams::kMaxBatchDims;

struct AttentionArgs {
  int batch_rank;
  int64_t batch[kMaxDims];
  int64_t q_batch[kMaxDims], k_batch[kMaxDims], v_batch[kMaxDims], mask_batch[kMaxDims];
  int64_t rows, n, m, d, dv;
  int64_t q_row, k_key, k_inner, v_key, mask_row, mask_key;
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
    int64_t qo = 0, ko = 0, vo = 0, mo = 0, rest = item;
    for (int b = a.batch_rank - 1; b >= 0; --b) {
      const int64_t idx = rest % a.batch[b];
      rest /= a.batch[b];
      qo += idx * a.q_batch[b];
      ko += idx * a.k_batch[b];
      vo += idx * a.v_batch[b];
      mo += idx * a.mask_batch[b];
    }
    const T* qr = q + qo + i * a.q_row;
    const T* mr = mask ? mask + mo + i * a.mask_row : nullptr;
    T* yr = y + row * a.dv;
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

template <typename T>
class AttentionKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    if (args_.rows == 0 || args_.dv == 0) return;
    const T* q = static_cast<const T*>(io.inputs[0]);
    const T* k = static_cast<const T*>(io.inputs[1]);
    const T* v = static_cast<const T*>(io.inputs[2]);
    const T* mask = has_mask_ ? static_cast<const T*>(io.inputs[3]) : nullptr;
    T* y = static_cast<T*>(io.outputs[0]);
    constexpr int kWarps = 8;
    const int64_t want = (args_.rows + kWarps - 1) / kWarps;
    const unsigned grid = static_cast<unsigned>(want < 65535LL * 32 ? want : 65535LL * 32);
    cudaStream_t s = Dev(io).stream;
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
    args_.batch_rank = static_cast<int>(p.batch.size());
    for (int b = 0; b < args_.batch_rank; ++b) {
      args_.batch[b] = p.batch[b];
      args_.q_batch[b] = p.q_batch[b];
      args_.k_batch[b] = p.k_batch[b];
      args_.v_batch[b] = p.v_batch[b];
      args_.mask_batch[b] = p.mask_batch[b];
    }
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
    args_.scale = p.scale;
    has_mask_ = p.has_mask;
  }

 private:
  AttentionArgs args_{};
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
