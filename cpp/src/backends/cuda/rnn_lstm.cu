// LSTM on CUDA (ONNX semantics, gate order i, o, f, c), float32, default
// activations (Sigmoid, Tanh, Tanh) only. Supports both directions and
// bidirectional, layouts 0 and 1, optional B, sequence_lens, initial_h,
// initial_c, peepholes P, clip, input_forget, and any subset of Y, Y_h, Y_c.
// The method is in rnn_common.cuh.
#include "backends/cuda/rnn_common.cuh"

namespace kaiwu {
namespace cuda {
namespace {

struct LstmStepArgs {
  RnnGeometry g;
  int64_t d = 0, s = 0;           // direction, step
  const int32_t* lens = nullptr;  // sequence_lens, or null
  const float* gates = nullptr;   // [batch, 4H]: h * R^T
  const float* xw = nullptr;      // [seq * batch, 4H]: X * W^T, rows in X's order
  const float* bias = nullptr;    // [8H]: Wb then Rb of direction d, or null
  const float* peep = nullptr;    // [3H]: Pi, Po, Pf of direction d, or null
  bool input_forget = false;
  float* c = nullptr;  // [batch, H] states, updated in place
  float* h = nullptr;
  float* y = nullptr;  // Y, or null
  int* error_flag = nullptr;
  int step = 0;
};

// One time step for every (batch row, hidden unit), as the CPU Cell: clip
// applies to every pre-activation (after its peephole term), input_forget
// replaces f by 1 - i, o's peephole reads the new cell state.
__global__ void LstmStepKernel(LstmStepArgs a) {
  const int64_t H = a.g.hidden, G = 4 * H;
  KAIWU_CUDA_LOOP(i, a.g.batch * H) {
    const int64_t b = i / H, j = i - b * H;
    const int64_t t = RnnStepTime(a.g, a.lens, a.d, a.s, b, a.error_flag, a.step);
    if (t < 0) continue;
    const float* hr = a.gates + b * G + j;
    const float* xw = a.xw + a.g.XRow(t, b) * G + j;
    float pre[4];  // i, o, f, c
    for (int k = 0; k < 4; ++k) {
      const float bias = a.bias ? a.bias[k * H + j] + a.bias[G + k * H + j] : 0.f;
      pre[k] = hr[k * H] + (xw[k * H] + bias);
    }
    const float c_prev = a.c[i];
    if (a.peep) {
      pre[0] += a.peep[j] * c_prev;
      pre[2] += a.peep[2 * H + j] * c_prev;
    }
    const float in_gate = SigmoidF(a.g.Clip(pre[0]));
    const float forget = a.input_forget ? 1.f - in_gate : SigmoidF(a.g.Clip(pre[2]));
    const float cand = tanhf(a.g.Clip(pre[3]));
    const float c_new = forget * c_prev + in_gate * cand;
    if (a.peep) pre[1] += a.peep[H + j] * c_new;
    const float h_new = SigmoidF(a.g.Clip(pre[1])) * tanhf(c_new);
    a.c[i] = c_new;
    a.h[i] = h_new;
    if (a.y) a.y[a.g.YOffset(t, a.d, b) + j] = h_new;
  }
}

class LstmKernel : public CudaKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    g_ = PrepareRnnGeometry(ctx, 4, {"Sigmoid", "Tanh", "Tanh"});
    has_bias_ = ctx.HasInput(3);
    has_lens_ = ctx.HasInput(4);
    has_init_h_ = ctx.HasInput(5);
    has_init_c_ = ctx.HasInput(6);
    has_peep_ = ctx.HasInput(7);
    input_forget_ = ctx.node.GetInt("input_forget", 0) != 0;
    num_outputs_ = static_cast<int>(ctx.outputs.size());
    scratch_ = RnnScratch(g_, 4);
    ctx.scratch_bytes = scratch_.bytes();
  }

  void Run(const KernelIO& io) const override {
    const DeviceContext& dev = Dev(io);
    const int64_t H = g_.hidden, G = 4 * H, I = g_.input, batch = g_.batch;
    if (batch == 0 || H == 0) return;  // every output is empty
    float* xw = scratch_.xw(io.scratch);
    float* gates = scratch_.gates(io.scratch);
    float* h = scratch_.state(io.scratch, 0);
    float* c = scratch_.state(io.scratch, 1);
    const float* x = static_cast<const float*>(io.inputs[0]);
    const float* w = static_cast<const float*>(io.inputs[1]);
    const float* r = static_cast<const float*>(io.inputs[2]);
    const float* bias = has_bias_ ? static_cast<const float*>(io.inputs[3]) : nullptr;
    const float* init_h = has_init_h_ ? static_cast<const float*>(io.inputs[5]) : nullptr;
    const float* init_c = has_init_c_ ? static_cast<const float*>(io.inputs[6]) : nullptr;
    const float* peep = has_peep_ ? static_cast<const float*>(io.inputs[7]) : nullptr;
    float* y = static_cast<float*>(io.outputs[0]);
    float* y_h = num_outputs_ > 1 ? static_cast<float*>(io.outputs[1]) : nullptr;
    float* y_c = num_outputs_ > 2 ? static_cast<float*>(io.outputs[2]) : nullptr;
    if (y && has_lens_) RnnZeroY(dev, g_, y, "LSTM zero Y");

    LstmStepArgs args;
    args.g = g_;
    args.lens = has_lens_ ? static_cast<const int32_t*>(io.inputs[4]) : nullptr;
    args.gates = gates;
    args.xw = xw;
    args.input_forget = input_forget_;
    args.c = c;
    args.h = h;
    args.y = y;
    args.error_flag = dev.error_flag;
    args.step = dev.step;
    const unsigned grid = GridFor(batch * H);
    for (int64_t d = 0; d < g_.dirs; ++d) {
      RowMajorSgemm(dev, false, true, g_.seq * batch, G, I, 1.f, x, I, w + d * G * I, I, xw, G);
      RnnLoadStates(dev, g_, d, init_h, h, init_c, c);
      args.d = d;
      args.bias = bias ? bias + d * 2 * G : nullptr;
      args.peep = peep ? peep + d * 3 * H : nullptr;
      for (int64_t s = 0; s < g_.seq; ++s) {
        RowMajorSgemm(dev, false, true, batch, G, H, 1.f, h, H, r + d * G * H, H, gates, G);
        args.s = s;
        LstmStepKernel<<<grid, kBlock, 0, dev.stream>>>(args);
        CheckLaunch("LSTM step kernel");
      }
      RnnStoreStates(dev, g_, d, h, y_h, c, y_c);
    }
  }

 private:
  RnnGeometry g_;
  bool has_bias_ = false, has_lens_ = false, has_init_h_ = false, has_init_c_ = false;
  bool has_peep_ = false, input_forget_ = false;
  int num_outputs_ = 0;
  RnnScratch scratch_;
};

}  // namespace

std::unique_ptr<Kernel> MakeLstmKernel(const Node&) { return std::make_unique<LstmKernel>(); }

}  // namespace cuda
}  // namespace kaiwu
