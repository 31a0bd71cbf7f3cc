// LSTM on CUDA (ONNX semantics, gate order i, o, f, c), float32, default
// activations (Sigmoid, Tanh, Tanh) only. Supports both directions and
// bidirectional, layouts 0 and 1, optional B, sequence_lens, initial_h,
// initial_c, peepholes P, clip, input_forget, and any subset of Y, Y_h, Y_c.
// The method is in rnn_common.cuh.
#include "backends/cuda/rnn_common.cuh"

namespace kaiwu {
namespace cuda {
namespace {

struct LstmStepArgs : RnnStepArgs {
  const float* peep = nullptr;  // [3H]: Pi, Po, Pf of direction d, or null
  bool input_forget = false;
  float* c = nullptr;  // [batch, H] cell state, updated in place
  const float* init_c = nullptr;  // initial_c (read by step 0 when load_init), or null
  float* y_c = nullptr;           // Y_c (written by the last step when store_final), or null
};

// The cell of row b, unit j at time t, as the CPU Cell: clip applies to every
// pre-activation (after its peephole term), input_forget replaces f by 1 - i,
// o's peephole reads the new cell state. *c and *h: the previous states in, the
// new ones out; Y[t] written.
__device__ inline void LstmCell(const LstmStepArgs& a, int64_t t, int64_t b, int64_t j, float* c,
                                float* h) {
  const int64_t H = a.g.hidden, G = 4 * H;
  const float* hr = a.gates + b * G + j;
  const float* xw = a.xw + a.g.XRow(t, b) * G + j;
  float pre[4];  // i, o, f, c
  for (int k = 0; k < 4; ++k) {
    const float bias = a.bias ? a.bias[k * H + j] + a.bias[G + k * H + j] : 0.f;
    pre[k] = hr[k * H] + (xw[k * H] + bias);
  }
  const float c_prev = *c;
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
  *c = c_new;
  *h = h_new;
  if (a.y) a.StoreY(a.g.YOffset(t, a.d, b) + j, h_new);
}

// One time step for every (batch row, hidden unit). With folded
// states, step 0 reads c (and h) from the initial states and writes every
// row's scratch states, and the last step writes Y_h and Y_c; a row whose
// sequence has ended keeps its states.
__global__ void LstmStepKernel(LstmStepArgs a) {
  const int64_t H = a.g.hidden;
  KAIWU_CUDA_LOOP(i, a.g.batch * H) {
    const int64_t b = i / H, j = i - b * H;
    const int64_t t = a.Time(b);
    const bool first = a.FromInit();
    float c_new = first ? (a.init_c ? a.init_c[a.g.StateOffset(a.d, b) + j] : 0.f) : a.c[i];
    float h_new = a.PrevH(i, b, j);
    if (t >= 0) LstmCell(a, t, b, j, &c_new, &h_new);
    if (t >= 0 || first) {
      a.c[i] = c_new;
      a.h[i] = h_new;
    }
    if (a.ToFinal()) {
      const int64_t k = a.g.StateOffset(a.d, b) + j;
      if (a.y_h) a.y_h[k] = h_new;
      if (a.y_c) a.y_c[k] = c_new;
    }
  }
}

class LstmKernel : public RnnKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    input_forget_ = PrepareRnn(ctx, 4, {"Sigmoid", "Tanh", "Tanh"}).input_forget;
  }

  void Run(const KernelIO& io) const override {
    const DeviceContext& dev = Dev(io);
    const int64_t H = g_.hidden, G = 4 * H, batch = g_.batch;
    if (batch == 0 || H == 0) return;  // every output is empty
    const float *r = Input(io, 2), *bias = Input(io, 3);
    const float *init_h = Input(io, 5), *init_c = Input(io, 6), *peep = Input(io, 7);
    LstmStepArgs args;
    BindRun(io, &args, "LSTM zero Y");
    args.input_forget = input_forget_;
    args.c = scratch_.state(io.scratch, 1);
    args.init_c = init_c;
    args.y_c = Output(io, 2);
    float* xw = scratch_.xw(io.scratch);  // written by the X * W^T GEMM, read by the steps
    const unsigned grid = GridFor(batch * H);
    for (int64_t d = 0; d < g_.dirs; ++d) {
      ProjectInput(dev, io, d, xw);
      const bool folded = FoldStepStates(io, &args);
      if (!folded) RnnLoadStates(dev, g_, d, init_h, args.h, init_c, args.c);
      args.d = d;
      args.bias = bias ? bias + d * 2 * G : nullptr;
      args.peep = peep ? peep + d * 3 * H : nullptr;
      for (int64_t s = 0; s < g_.seq; ++s) {
        // Step 0 of a folded run reads h from initial_h.
        const bool first = folded && s == 0;
        RowMajorSgemm(dev, false, true, batch, G, H, 1.f, first ? init_h + InitOffset(d) : args.h,
                      first ? InitStride() : H, r + d * G * H, H, args.gates, G, tf32_);
        args.s = s;
        LstmStepKernel<<<grid, kBlock, 0, dev.stream>>>(args);
        CheckLaunch("LSTM step kernel");
      }
      if (!folded) RnnStoreStates(dev, g_, d, args.h, Output(io, 1), args.c, Output(io, 2));
    }
  }

 private:
  bool input_forget_ = false;
};

}  // namespace

std::unique_ptr<Kernel> MakeLstmKernel(const Node&) { return std::make_unique<LstmKernel>(); }

}  // namespace cuda
}  // namespace kaiwu
