// GRU on CUDA (ONNX semantics, gate order z, r, h), float32, default
// activations (Sigmoid, Tanh) only. Supports both directions and
// bidirectional, layouts 0 and 1, linear_before_reset 0 and 1, optional B,
// sequence_lens, initial_h, clip, and Y and/or Y_h. The method is in
// rnn_common.cuh; with linear_before_reset = 0 a step runs two GEMMs: h * Rzr^T,
// the z/r gate kernel producing r . h, then (r . h) * Rh^T before the update.
#include <algorithm>
#include <cstdlib>

#include "backends/cuda/rnn_common.cuh"

namespace kaiwu {
namespace cuda {
namespace {

// gates: [batch, 3H]: h * R^T for z, r and h (linear_before_reset), or: z, r
// (written by GruResetKernel) and (r . h) * Rh^T. bias: [6H], Wb then Rb (z, r,
// h each).
struct GruStepArgs : RnnStepArgs {
  bool linear_before_reset = false;
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
    a.rh[i] = r * a.h[i];
  }
}

// The candidate and the state update of one step:
//   linear_before_reset = 1: hh = tanh(clip(Xh + Wbh + r . (h * Rh^T + Rbh)))
//   linear_before_reset = 0: hh = tanh(clip((r . h) * Rh^T + Xh + Wbh + Rbh))
//   h = (1 - z) . hh + z . h
__global__ void GruStepKernel(GruStepArgs a) {
  const int64_t H = a.g.hidden, G = 3 * H;
  KAIWU_CUDA_LOOP(i, a.g.batch * H) {
    const int64_t b = i / H, j = i - b * H;
    const int64_t t = a.Time(b);
    if (t < 0) continue;
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
    const float h_new = (1.f - z) * hh + z * a.h[i];
    a.h[i] = h_new;
    if (a.y) a.y[a.g.YOffset(t, a.d, b) + j] = h_new;
  }
}

// linear_before_reset = 1, hidden <= 128: every step of one direction in one
// launch. One thread per gate row (3H threads) holds its row of R in registers
// for the whole sequence; the block keeps h of kGruRows batch rows in shared
// memory, and per step each thread computes its gate row's h * R[j]^T for every
// row (reading h as broadcast float4s), then threads do GruStepKernel's math
// per (row, hidden unit). One launch instead of a GEMM and a gate kernel per
// step, which at small batches are all launch latency.
constexpr int kGruRows = 4;
constexpr int kGruMaxHidden = 128;
constexpr int kGruThreads = 3 * kGruMaxHidden;

size_t GruSequenceSmem(int64_t H) {
  return sizeof(float) * static_cast<size_t>(kGruRows * (2 * H + 3 * H));
}

__global__ void __launch_bounds__(kGruThreads, 1) GruSequenceKernel(GruStepArgs a, const float* __restrict__ R) {
  extern __shared__ __align__(16) float sm[];
  const int H = static_cast<int>(a.g.hidden), G = 3 * H;  // H <= kGruMaxHidden, H % 4 == 0
  const int64_t b0 = static_cast<int64_t>(blockIdx.x) * kGruRows;
  const int rows = static_cast<int>(min(static_cast<int64_t>(kGruRows), a.g.batch - b0));
  const int tid = threadIdx.x;
  float* hs = sm;                  // h [kGruRows][H]
  float* hn = hs + kGruRows * H;   // the step's new h [kGruRows][H]
  float* hr = hn + kGruRows * H;   // h * R^T [kGruRows][G]
  float4 w[kGruMaxHidden / 4];     // row tid of R (zeros past H)
#pragma unroll
  for (int q = 0; q < kGruMaxHidden / 4; ++q)
    w[q] = tid < G && 4 * q < H ? __ldg(reinterpret_cast<const float4*>(R + static_cast<int64_t>(tid) * H) + q)
                                : make_float4(0.f, 0.f, 0.f, 0.f);
  for (int i = tid; i < kGruRows * H; i += blockDim.x) hs[i] = i < rows * H ? a.h[b0 * H + i] : 0.f;
  __syncthreads();
  for (int64_t s = 0; s < a.g.seq; ++s) {
    a.s = s;
    if (tid < G) {
#pragma unroll
      for (int r = 0; r < kGruRows; ++r) {
        const float4* h4 = reinterpret_cast<const float4*>(hs + r * H);
        float acc = 0.f;
#pragma unroll
        for (int q = 0; q < kGruMaxHidden / 4; ++q) {
          if (4 * q < H) {
            const float4 hv = h4[q];
            acc += hv.x * w[q].x + hv.y * w[q].y + hv.z * w[q].z + hv.w * w[q].w;
          }
        }
        hr[r * G + tid] = acc;
      }
    }
    __syncthreads();
    for (int r = 0; r < rows; ++r) {
      const int64_t b = b0 + r;
      const int64_t t = a.Time(b);
      for (int j = tid; j < H; j += blockDim.x) {
        const int i = r * H + j;
        if (t < 0) {  // this row's sequence has ended: h stays
          hn[i] = hs[i];
          continue;
        }
        const float* xw = a.xw + a.g.XRow(t, b) * G + j;
        const float wbh = a.bias ? a.bias[2 * H + j] : 0.f;
        const float rbh = a.bias ? a.bias[G + 2 * H + j] : 0.f;
        float z, rg;
        GruZr(a, hr + r * G + j, xw, j, &z, &rg);
        const float pre = xw[2 * H] + wbh + rg * (hr[r * G + 2 * H + j] + rbh);
        const float hh = tanhf(a.g.Clip(pre));
        const float h_new = (1.f - z) * hh + z * hs[i];
        hn[i] = h_new;
        if (a.y) a.y[a.g.YOffset(t, a.d, b) + j] = h_new;
      }
    }
    __syncthreads();
    for (int i = tid; i < rows * H; i += blockDim.x) hs[i] = hn[i];
    __syncthreads();
  }
  for (int i = tid; i < rows * H; i += blockDim.x) a.h[b0 * H + i] = hs[i];
}

class GruKernel : public RnnKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    linear_before_reset_ = PrepareRnn(ctx, 3, {"Sigmoid", "Tanh"}).linear_before_reset;
    // Up to this batch the sequence kernel runs (bench/results/h100/gru_sequence_ab.md);
    // KAIWU_GRU_SEQUENCE_MAX_BATCH sets it (0: never).
    int64_t max_batch = 32;
    if (const char* env = std::getenv("KAIWU_GRU_SEQUENCE_MAX_BATCH")) max_batch = std::atoll(env);
    sequence_smem_ = GruSequenceSmem(g_.hidden);
    sequence_kernel_ = linear_before_reset_ && g_.batch <= max_batch && g_.hidden > 0 &&
                       g_.hidden <= kGruMaxHidden && g_.hidden % 4 == 0;
  }

  void Run(const KernelIO& io) const override {
    const DeviceContext& dev = Dev(io);
    const int64_t H = g_.hidden, G = 3 * H, I = g_.input, batch = g_.batch;
    if (batch == 0 || H == 0) return;  // every output is empty
    const float *x = Input(io, 0), *w = Input(io, 1), *r = Input(io, 2), *bias = Input(io, 3);
    const float* init_h = Input(io, 5);
    GruStepArgs args;
    BindRun(io, &args, "GRU zero Y");
    args.linear_before_reset = linear_before_reset_;
    args.rh = scratch_.state(io.scratch, 1);
    float* xw = scratch_.xw(io.scratch);  // written by the X * W^T GEMM, read by the steps
    float* h = args.h;
    float* gates = args.gates;
    const unsigned grid = GridFor(batch * H);
    for (int64_t d = 0; d < g_.dirs; ++d) {
      RowMajorSgemm(dev, false, true, g_.seq * batch, G, I, 1.f, x, I, w + d * G * I, I, xw, G);
      RnnLoadStates(dev, g_, d, init_h, h, nullptr, nullptr);
      args.d = d;
      args.bias = bias ? bias + d * 2 * G : nullptr;
      const float* rd = r + d * G * H;
      if (sequence_kernel_ && (reinterpret_cast<uintptr_t>(rd) & 15) == 0) {
        GruSequenceKernel<<<static_cast<unsigned>((batch + kGruRows - 1) / kGruRows), kGruThreads,
                            sequence_smem_, dev.stream>>>(args, rd);
        CheckLaunch("GRU sequence kernel");
        RnnStoreStates(dev, g_, d, h, Output(io, 1), nullptr, nullptr);
        continue;
      }
      for (int64_t s = 0; s < g_.seq; ++s) {
        args.s = s;
        if (linear_before_reset_) {
          RowMajorSgemm(dev, false, true, batch, G, H, 1.f, h, H, rd, H, gates, G);
        } else {
          RowMajorSgemm(dev, false, true, batch, 2 * H, H, 1.f, h, H, rd, H, gates, G);
          GruResetKernel<<<grid, kBlock, 0, dev.stream>>>(args);
          CheckLaunch("GRU reset kernel");
          RowMajorSgemm(dev, false, true, batch, H, H, 1.f, args.rh, H, rd + 2 * H * H, H, gates + 2 * H,
                        G);
        }
        GruStepKernel<<<grid, kBlock, 0, dev.stream>>>(args);
        CheckLaunch("GRU step kernel");
      }
      RnnStoreStates(dev, g_, d, h, Output(io, 1), nullptr, nullptr);
    }
  }

 private:
  bool linear_before_reset_ = false;
  bool sequence_kernel_ = false;  // GruSequenceKernel runs the steps
  size_t sequence_smem_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> MakeGruKernel(const Node&) { return std::make_unique<GruKernel>(); }

}  // namespace cuda
}  // namespace kaiwu
