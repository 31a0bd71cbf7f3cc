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
// for the whole sequence; the block keeps h of kRows batch rows in shared
// memory. Per step each thread computes its gate row's h * R[j]^T for each of
// the block's rows (h read as broadcast float4s, independent accumulators),
// then thread group g = tid / H does GruStepKernel's math for hidden unit
// tid % H of rows g, g + 3, ... (its X * W^T loaded before the products, the
// biases once). One launch instead of a GEMM and a gate kernel per step, which
// at small batches are all launch latency. kRows is chosen so that the blocks
// fill the GPU once (GruSequenceRows).
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
  float bz = 0.f, br = 0.f, wbh = 0.f, rbh = 0.f;
  if (updates && a.bias) {
    bz = a.bias[j] + a.bias[G + j];
    br = a.bias[H + j] + a.bias[G + H + j];
    wbh = a.bias[2 * H + j];
    rbh = a.bias[G + 2 * H + j];
  }
  for (int i = tid; i < kRows * H; i += blockDim.x) hs[i] = i < rows * H ? a.h[b0 * H + i] : 0.f;
  __syncthreads();
  for (int64_t s = 0; s < a.g.seq; ++s) {
    // This step's X * W^T of the rows this thread updates, loaded before the products.
    int64_t t[kPerThread];
    float xz[kPerThread], xr[kPerThread], xh[kPerThread];
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int r = group + 3 * k;
      t[k] = -1;
      if (updates && r < rows) {
        const int64_t b = b0 + r;
        t[k] = RnnStepTime(a.g, a.lens, a.d, s, b, a.error_flag, a.step);
        if (t[k] >= 0) {
          const float* xw = a.xw + a.g.XRow(t[k], b) * G + j;
          xz[k] = xw[0];
          xr[k] = xw[H];
          xh[k] = xw[2 * H];
        }
      }
    }
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
      if (t[k] < 0) continue;  // no such row, or its sequence has ended: h stays
      const int r = group + 3 * k;
      const int i = r * H + j;
      const float* g = hr + r * G + j;
      const float z = SigmoidF(a.g.Clip(g[0] + (xz[k] + bz)));
      const float rg = SigmoidF(a.g.Clip(g[H] + (xr[k] + br)));
      const float pre = xh[k] + wbh + rg * (g[2 * H] + rbh);
      const float hh = tanhf(a.g.Clip(pre));
      const float h_new = (1.f - z) * hh + z * hs[i];
      hs[i] = h_new;  // only this thread reads or writes hs[i] until the next barrier
      if (a.y) a.y[a.g.YOffset(t[k], a.d, b0 + r) + j] = h_new;
    }
    __syncthreads();
  }
  for (int i = tid; i < rows * H; i += blockDim.x) a.h[b0 * H + i] = hs[i];
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

class GruKernel : public RnnKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    linear_before_reset_ = PrepareRnn(ctx, 3, {"Sigmoid", "Tanh"}).linear_before_reset;
    // Up to this batch the sequence kernel runs (bench/results/h100/gru_sequence_ab.md: faster
    // at 1-256, slower at 1024); KAIWU_GRU_SEQUENCE_MAX_BATCH sets it (0: never).
    int64_t max_batch = 512;
    if (const char* env = std::getenv("KAIWU_GRU_SEQUENCE_MAX_BATCH")) max_batch = std::atoll(env);
    sequence_kernel_ = linear_before_reset_ && g_.batch <= max_batch && g_.hidden > 0 &&
                       g_.hidden <= kGruMaxHidden && g_.hidden % 4 == 0;
    sequence_rows_ = sequence_kernel_ ? GruSequenceRows(g_.batch) : 0;
    sequence_smem_ = GruSequenceSmem(g_.hidden, sequence_rows_);
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
      RowMajorSgemm(dev, false, true, g_.seq * batch, G, I, 1.f, x, I, w + d * G * I, I, xw, G, tf32_);
      RnnLoadStates(dev, g_, d, init_h, h, nullptr, nullptr);
      args.d = d;
      args.bias = bias ? bias + d * 2 * G : nullptr;
      const float* rd = r + d * G * H;
      if (sequence_kernel_ && (reinterpret_cast<uintptr_t>(rd) & 15) == 0) {
        LaunchGruSequence(sequence_rows_, batch, sequence_smem_, dev.stream, args, rd);
        RnnStoreStates(dev, g_, d, h, Output(io, 1), nullptr, nullptr);
        continue;
      }
      for (int64_t s = 0; s < g_.seq; ++s) {
        args.s = s;
        if (linear_before_reset_) {
          RowMajorSgemm(dev, false, true, batch, G, H, 1.f, h, H, rd, H, gates, G, tf32_);
        } else {
          RowMajorSgemm(dev, false, true, batch, 2 * H, H, 1.f, h, H, rd, H, gates, G, tf32_);
          GruResetKernel<<<grid, kBlock, 0, dev.stream>>>(args);
          CheckLaunch("GRU reset kernel");
          RowMajorSgemm(dev, false, true, batch, H, H, 1.f, args.rh, H, rd + 2 * H * H, H, gates + 2 * H,
                        G, tf32_);
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
  int sequence_rows_ = 0;         // its batch rows per block
  size_t sequence_smem_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> MakeGruKernel(const Node&) { return std::make_unique<GruKernel>(); }

}  // namespace cuda
}  // namespace kaiwu
