// GRU on CUDA (ONNX semantics, gate order z, r, h), float32, default
// activations (Sigmoid, Tanh) only. Supports both directions and
// bidirectional, layouts 0 and 1, linear_before_reset 0 and 1, optional B,
// sequence_lens, initial_h, clip, and Y and/or Y_h. The method is in
// rnn_common.cuh; with linear_before_reset = 0 a step runs two GEMMs: h * Rzr^T,
// the z/r gate kernel producing r . h, then (r . h) * Rh^T before the update.
#include "backends/cuda/rnn_common.cuh"

namespace kaiwu {
namespace cuda {
namespace {

struct GruStepArgs {
  RnnGeometry g;
  int64_t d = 0, s = 0;           // direction, step
  const int32_t* lens = nullptr;  // sequence_lens, or null
  // [batch, 3H]: h * R^T for z, r and h (linear_before_reset), or: z, r
  // (written by GruResetKernel) and (r . h) * Rh^T.
  float* gates = nullptr;
  const float* xw = nullptr;    // [seq * batch, 3H]: X * W^T, rows in X's order
  const float* bias = nullptr;  // [6H]: Wb then Rb (z, r, h each) of direction d, or null
  bool linear_before_reset = false;
  float* h = nullptr;   // [batch, H] state, updated in place
  float* rh = nullptr;  // [batch, H]: r . h (linear_before_reset = 0)
  float* y = nullptr;   // Y, or null
  int* error_flag = nullptr;
  int step = 0;
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
    const int64_t t = RnnStepTime(a.g, a.lens, a.d, a.s, b, a.error_flag, a.step);
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
    const int64_t t = RnnStepTime(a.g, a.lens, a.d, a.s, b, a.error_flag, a.step);
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

class GruKernel : public CudaKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    g_ = PrepareRnnGeometry(ctx, 3, {"Sigmoid", "Tanh"});
    has_bias_ = ctx.HasInput(3);
    has_lens_ = ctx.HasInput(4);
    has_init_h_ = ctx.HasInput(5);
    linear_before_reset_ = ctx.node.GetInt("linear_before_reset", 0) != 0;
    num_outputs_ = static_cast<int>(ctx.outputs.size());
    scratch_ = RnnScratch(g_, 3);
    ctx.scratch_bytes = scratch_.bytes();
  }

  void Run(const KernelIO& io) const override {
    const DeviceContext& dev = Dev(io);
    const int64_t H = g_.hidden, G = 3 * H, I = g_.input, batch = g_.batch;
    if (batch == 0 || H == 0) return;  // every output is empty
    float* xw = scratch_.xw(io.scratch);
    float* gates = scratch_.gates(io.scratch);
    float* h = scratch_.state(io.scratch, 0);
    float* rh = scratch_.state(io.scratch, 1);
    const float* x = static_cast<const float*>(io.inputs[0]);
    const float* w = static_cast<const float*>(io.inputs[1]);
    const float* r = static_cast<const float*>(io.inputs[2]);
    const float* bias = has_bias_ ? static_cast<const float*>(io.inputs[3]) : nullptr;
    const float* init_h = has_init_h_ ? static_cast<const float*>(io.inputs[5]) : nullptr;
    float* y = static_cast<float*>(io.outputs[0]);
    float* y_h = num_outputs_ > 1 ? static_cast<float*>(io.outputs[1]) : nullptr;
    if (y && has_lens_) RnnZeroY(dev, g_, y, "GRU zero Y");

    GruStepArgs args;
    args.g = g_;
    args.lens = has_lens_ ? static_cast<const int32_t*>(io.inputs[4]) : nullptr;
    args.gates = gates;
    args.xw = xw;
    args.linear_before_reset = linear_before_reset_;
    args.h = h;
    args.rh = rh;
    args.y = y;
    args.error_flag = dev.error_flag;
    args.step = dev.step;
    const unsigned grid = GridFor(batch * H);
    for (int64_t d = 0; d < g_.dirs; ++d) {
      RowMajorSgemm(dev, false, true, g_.seq * batch, G, I, 1.f, x, I, w + d * G * I, I, xw, G);
      RnnLoadStates(dev, g_, d, init_h, h, nullptr, nullptr);
      args.d = d;
      args.bias = bias ? bias + d * 2 * G : nullptr;
      const float* rd = r + d * G * H;
      for (int64_t s = 0; s < g_.seq; ++s) {
        args.s = s;
        if (linear_before_reset_) {
          RowMajorSgemm(dev, false, true, batch, G, H, 1.f, h, H, rd, H, gates, G);
        } else {
          RowMajorSgemm(dev, false, true, batch, 2 * H, H, 1.f, h, H, rd, H, gates, G);
          GruResetKernel<<<grid, kBlock, 0, dev.stream>>>(args);
          CheckLaunch("GRU reset kernel");
          RowMajorSgemm(dev, false, true, batch, H, H, 1.f, rh, H, rd + 2 * H * H, H, gates + 2 * H,
                        G);
        }
        GruStepKernel<<<grid, kBlock, 0, dev.stream>>>(args);
        CheckLaunch("GRU step kernel");
      }
      RnnStoreStates(dev, g_, d, h, y_h, nullptr, nullptr);
    }
  }

 private:
  RnnGeometry g_;
  bool has_bias_ = false, has_lens_ = false, has_init_h_ = false;
  bool linear_before_reset_ = false;
  int num_outputs_ = 0;
  RnnScratch scratch_;
};

}  // namespace

std::unique_ptr<Kernel> MakeGruKernel(const Node&) { return std::make_unique<GruKernel>(); }

}  // namespace cuda
}  // namespace kaiwu
