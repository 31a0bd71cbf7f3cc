// GRU (ONNX, opsets 7-22 semantics; gate order z, r, h).
//
// Per direction: one GEMM computes X*W^T for every time step into scratch.
// Each step then runs, with linear_before_reset = 1, one GEMM H*R^T and the
// fused gate math; with linear_before_reset = 0, one GEMM for the z and r
// gates, the gate math producing r.H, a second GEMM (r.H)*Rh^T, and the
// final update. Gate math runs in parallel over the batch. In CPU sessions W
// and R come prepacked too (passes/prepack_gemm.cc: inputs 6 and 7), and the
// GEMMs read the packed panels (sgemm_packed.h); (r.H)*Rh^T does where Rh
// starts on a panel (2 * hidden % 16 == 0).
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

class GruKernel : public Kernel {
 public:
  explicit GruKernel(const Node& node) : node_(node) {}

  void Prepare(PrepareContext& ctx) override {
    params_ = ctx.SharedParams<RnnParams>();
    d_ = params_->dims;
    linear_before_reset_ = params_->linear_before_reset;
    packed_ = params_->packed;
    acts_ = params_->activations;
    num_outputs_ = static_cast<int>(ctx.outputs.size());
    scratch_ = RnnScratch(d_, 3);  // states: h, r.h; bias row: z, r, Wbh, Rbh
    ctx.scratch_bytes = scratch_.bytes();
  }

  void Run(const KernelIO& io) const override {
    const int64_t H = d_.hidden, G = 3 * H, batch = d_.batch;
    const RnnRun run = BeginRnnRun(node_, *params_, scratch_, io, num_outputs_);
    float *xw = run.xw, *gates = run.gates, *h = run.state[0], *rh = run.state[1], *bias = run.bias;
    const int32_t* lens = run.lens;
    const float *x = run.x, *w = run.w, *r = run.r, *bsrc = run.b, *init_h = run.init_h;
    float *y = run.y, *y_h = run.y_h;

    // Packed W and R (inputs 6, 7): per direction [panels, input or H, 16].
    const int64_t panels = (G + kPackedPanel - 1) / kPackedPanel;
    const float* pw = packed_ ? static_cast<const float*>(io.inputs[6]) : nullptr;
    const float* pr = packed_ ? static_cast<const float*>(io.inputs[7]) : nullptr;
    for (int64_t d = 0; d < d_.dirs; ++d) {
      RnnGemm(d_.seq * batch, G, d_.input, x, w + d * G * d_.input,
              pw ? pw + d * panels * d_.input * kPackedPanel : nullptr, xw, G, io.pool);
      // bias = [Wbz+Rbz, Wbr+Rbr, Wbh, Rbh]
      for (int64_t j = 0; j < 4 * H; ++j) {
        float v = 0.f;
        if (bsrc) {
          const float* bd = bsrc + d * 2 * G;
          v = j < 2 * H ? bd[j] + bd[G + j] : j < 3 * H ? bd[j] : bd[G + j - H];
        }
        bias[j] = v;
      }
      std::fill(rh, rh + batch * H, 0.f);  // rows of finished sequences stay defined
      for (int64_t b = 0; b < batch; ++b) {
        if (init_h) std::memcpy(h + b * H, init_h + d_.StateOffset(d, b), sizeof(float) * H);
        else std::fill(h + b * H, h + (b + 1) * H, 0.f);
      }
      const float* rd = r + d * G * H;
      const float* prd = pr ? pr + d * panels * H * kPackedPanel : nullptr;
      // Rh's packed panels where Rh starts on one (2H % 16 == 0), else Rh itself.
      const float* prh = prd && (2 * H) % kPackedPanel == 0
                             ? prd + 2 * H / kPackedPanel * H * kPackedPanel
                             : nullptr;
      const RnnActivation* acts = &acts_[d * 2];
      const bool backward = d_.Backward(d);
      auto time_of = [&](int64_t s, int64_t b) { return backward ? lens[b] - 1 - s : s; };
      for (int64_t s = 0; s < d_.seq; ++s) {
        if (linear_before_reset_) {
          RnnGemm(batch, G, H, h, rd, prd, gates, G, io.pool);
        } else {
          RnnGemm(batch, 2 * H, H, h, rd, prd, gates, G, io.pool);
          io.pool->ParallelFor(batch, 20.0 * H, [&](int64_t b0, int64_t b1) {
            for (int64_t b = b0; b < b1; ++b) {
              if (s >= lens[b]) continue;
              const float* xr = xw + d_.XRow(time_of(s, b), b) * G;
              ZrGates(gates + b * G, xr, bias, acts[0]);
              Arr(rh + b * H, H) = ConstArr(gates + b * G + H, H) * ConstArr(h + b * H, H);
            }
          });
          RnnGemm(batch, H, H, rh, rd + 2 * H * H, prh, gates + 2 * H, G, io.pool);
        }
        io.pool->ParallelFor(batch, 30.0 * H, [&](int64_t b0, int64_t b1) {
          for (int64_t b = b0; b < b1; ++b) {
            if (s >= lens[b]) continue;
            int64_t t = time_of(s, b);
            Update(gates + b * G, xw + d_.XRow(t, b) * G, bias, acts, h + b * H);
            if (y) std::memcpy(y + d_.YOffset(t, d, b), h + b * H, sizeof(float) * H);
          }
        });
      }
      if (y_h)
        for (int64_t b = 0; b < batch; ++b)
          std::memcpy(y_h + d_.StateOffset(d, b), h + b * H, sizeof(float) * H);
    }
  }

 private:
  // z and r gates of one row in place: g[0, 2H) = f(g + xw + bias).
  void ZrGates(float* g, const float* xw, const float* bias, const RnnActivation& f) const {
    const int64_t n = 2 * d_.hidden;
    Arr(g, n) += ConstArr(xw, n) + ConstArr(bias, n);
    if (d_.has_clip) ClipInPlace(g, n, d_.clip);
    ApplyActivation(f, g, n);
  }

  // The rest of one row's step; g[2H, 3H) holds H*Rh^T (linear_before_reset)
  // or (r.H)*Rh^T. Updates h.
  void Update(float* g, const float* xw, const float* bias, const RnnActivation* acts,
              float* h) const {
    const int64_t H = d_.hidden;
    if (linear_before_reset_) ZrGates(g, xw, bias, acts[0]);
    Arr z(g, H), r(g + H, H), hh(g + 2 * H, H), state(h, H);
    ConstArr xh(xw + 2 * H, H), wbh(bias + 2 * H, H), rbh(bias + 3 * H, H);
    if (linear_before_reset_) hh = xh + wbh + r * (hh + rbh);
    else hh += xh + wbh + rbh;
    if (d_.has_clip) ClipInPlace(g + 2 * H, H, d_.clip);
    ApplyActivation(acts[1], g + 2 * H, H);
    state = (1.f - z) * hh + z * state;
  }

  Node node_;
  std::shared_ptr<const RnnParams> params_;
  RnnDims d_;
  bool linear_before_reset_ = false;
  bool packed_ = false;  // W and R also come packed (inputs 6, 7)
  int num_outputs_ = 0;
  std::vector<RnnActivation> acts_;
  RnnScratch scratch_;
};

}  // namespace

std::unique_ptr<Kernel> MakeGruKernel(const Node& node) {
  return std::make_unique<GruKernel>(node);
}

}  // namespace cpu
}  // namespace kaiwu
