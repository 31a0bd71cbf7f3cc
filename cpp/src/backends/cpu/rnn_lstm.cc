// LSTM (ONNX, opsets 7-22 semantics; gate order i, o, f, c).
//
// Per direction: one GEMM computes X*W^T for every time step into scratch,
// then each step does one GEMM for H*R^T (on W and R prepacked by
// passes/prepack_gemm.cc in CPU sessions: sgemm_packed.h) and the fused gate math per batch
// row (parallel over the batch). Supports peepholes, clip, input_forget, all
// ONNX activations, per-batch sequence_lens, both layouts and directions.
#include <Eigen/Core>
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/rnn_common.h"
#include "backends/cpu/sgemm_packed.h"

namespace kaiwu {
namespace cpu {
namespace {

using Arr = Eigen::Map<Eigen::ArrayXf>;
using ConstArr = Eigen::Map<const Eigen::ArrayXf>;

class LstmKernel : public Kernel {
 public:
  explicit LstmKernel(const Node& node) : node_(node) {}

  void Prepare(PrepareContext& ctx) override {
    params_ = ctx.SharedParams<RnnParams>();
    d_ = params_->dims;
    has_init_c_ = params_->has_init_c;
    has_peep_ = params_->has_peep;
    input_forget_ = params_->input_forget;
    packed_ = params_->packed;
    acts_ = params_->activations;
    num_outputs_ = static_cast<int>(ctx.outputs.size());
    scratch_ = RnnScratch(d_, 4);  // states: h, c; bias row: Wb + Rb
    ctx.scratch_bytes = scratch_.bytes();
  }

  void Run(const KernelIO& io) const override {
    const int64_t H = d_.hidden, G = 4 * H, batch = d_.batch;
    const RnnRun run = BeginRnnRun(node_, *params_, scratch_, io, num_outputs_);
    float *xw = run.xw, *gates = run.gates, *h = run.state[0], *c = run.state[1], *bias = run.bias;
    const int32_t* lens = run.lens;
    const float *x = run.x, *w = run.w, *r = run.r, *bsrc = run.b, *init_h = run.init_h;
    float *y = run.y, *y_h = run.y_h;
    const float* init_c = has_init_c_ ? static_cast<const float*>(io.inputs[6]) : nullptr;
    const float* peep = has_peep_ ? static_cast<const float*>(io.inputs[7]) : nullptr;
    float* y_c = num_outputs_ > 2 ? static_cast<float*>(io.outputs[2]) : nullptr;

    // Packed W and R (inputs 8, 9): per direction [panels, input or H, 16].
    const int64_t panels = (G + kPackedPanel - 1) / kPackedPanel;
    const float* pw = packed_ ? static_cast<const float*>(io.inputs[8]) : nullptr;
    const float* pr = packed_ ? static_cast<const float*>(io.inputs[9]) : nullptr;
    for (int64_t d = 0; d < d_.dirs; ++d) {
      RnnGemm(d_.seq * batch, G, d_.input, x, w + d * G * d_.input,
              pw ? pw + d * panels * d_.input * kPackedPanel : nullptr, xw, G, io.pool);
      for (int64_t j = 0; j < G; ++j)
        bias[j] = bsrc ? bsrc[d * 2 * G + j] + bsrc[d * 2 * G + G + j] : 0.f;
      for (int64_t b = 0; b < batch; ++b) {
        int64_t off = d_.StateOffset(d, b);
        if (init_h) std::memcpy(h + b * H, init_h + off, sizeof(float) * H);
        else std::fill(h + b * H, h + (b + 1) * H, 0.f);
        if (init_c) std::memcpy(c + b * H, init_c + off, sizeof(float) * H);
        else std::fill(c + b * H, c + (b + 1) * H, 0.f);
      }
      const float* rd = r + d * G * H;
      const float* pd = peep ? peep + d * 3 * H : nullptr;
      const RnnActivation* acts = &acts_[d * 3];
      const bool backward = d_.Backward(d);
      for (int64_t s = 0; s < d_.seq; ++s) {
        RnnGemm(batch, G, H, h, rd, pr ? pr + d * panels * H * kPackedPanel : nullptr, gates, G,
                io.pool);
        io.pool->ParallelFor(batch, 40.0 * H, [&](int64_t b0, int64_t b1) {
          for (int64_t b = b0; b < b1; ++b) {
            if (s >= lens[b]) continue;
            int64_t t = backward ? lens[b] - 1 - s : s;
            Cell(gates + b * G, xw + d_.XRow(t, b) * G, bias, pd, acts, c + b * H, h + b * H);
            if (y) std::memcpy(y + d_.YOffset(t, d, b), h + b * H, sizeof(float) * H);
          }
        });
      }
      for (int64_t b = 0; b < batch; ++b) {
        int64_t off = d_.StateOffset(d, b);
        if (y_h) std::memcpy(y_h + off, h + b * H, sizeof(float) * H);
        if (y_c) std::memcpy(y_c + off, c + b * H, sizeof(float) * H);
      }
    }
  }

 private:
  // One batch row: g holds H*R^T for gates [i, o, f, c]; updates c and h.
  void Cell(float* g, const float* xw, const float* bias, const float* peep,
            const RnnActivation* acts, float* c, float* h) const {
    const int64_t H = d_.hidden;
    Arr all(g, 4 * H);
    all += ConstArr(xw, 4 * H) + ConstArr(bias, 4 * H);
    float *gi = g, *go = g + H, *gf = g + 2 * H, *gc = g + 3 * H;
    Arr i(gi, H), o(go, H), f(gf, H), cand(gc, H), cell(c, H);
    if (peep) {
      i += ConstArr(peep, H) * cell;
      f += ConstArr(peep + 2 * H, H) * cell;
      if (d_.has_clip) {
        ClipInPlace(gi, H, d_.clip);
        ClipInPlace(gf, 2 * H, d_.clip);
      }
      ApplyActivation(acts[0], gi, H);
      ApplyActivation(acts[0], gf, H);
    } else {
      if (d_.has_clip) ClipInPlace(g, 4 * H, d_.clip);
      ApplyActivation(acts[0], g, 3 * H);  // i, o, f
    }
    ApplyActivation(acts[1], gc, H);
    if (input_forget_) f = 1.f - i;
    cell = f * cell + i * cand;
    if (peep) {
      o += ConstArr(peep + H, H) * cell;
      if (d_.has_clip) ClipInPlace(go, H, d_.clip);
      ApplyActivation(acts[0], go, H);
    }
    cand = cell;
    ApplyActivation(acts[2], gc, H);
    Arr(h, H) = o * cand;
  }

  Node node_;
  std::shared_ptr<const RnnParams> params_;
  RnnDims d_;
  bool has_init_c_ = false;
  bool has_peep_ = false;
  bool input_forget_ = false;
  bool packed_ = false;
  int num_outputs_ = 0;
  std::vector<RnnActivation> acts_;
  RnnScratch scratch_;
};

}  // namespace

std::unique_ptr<Kernel> MakeLstmKernel(const Node& node) {
  return std::make_unique<LstmKernel>(node);
}

}  // namespace cpu
}  // namespace kaiwu
