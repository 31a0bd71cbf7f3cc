// Registration of the recurrent kernels and the parts LSTM and GRU share:
// activation functions, sequence lengths, scratch.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/rnn_common.h"
#include "backends/cpu/sgemm_packed.h"

namespace kaiwu {
namespace cpu {

namespace {

using Arr = Eigen::Map<Eigen::ArrayXf>;

int64_t Align16(int64_t n) { return (n + 15) / 16 * 16; }

}  // namespace

void RnnGemm(int64_t rows, int64_t n, int64_t k, const float* a, const float* w,
             const float* packed, float* out, int64_t ldc, ThreadPool* pool) {
  if (packed) {
    static const Activation kNone;
    SgemmPackedB(rows, n, k, a, k, packed, nullptr, kNone, out, ldc, pool);
  } else {
    Sgemm(false, true, rows, n, k, 1.f, a, k, w, k, 0.f, out, ldc, pool);
  }
}

void ApplyActivation(const RnnActivation& a, float* x, int64_t n) {
  Arr v(x, n);
  switch (a.kind) {
    case RnnActKind::kSigmoid: v = v.logistic(); break;
    case RnnActKind::kTanh: v = v.tanh(); break;
    case RnnActKind::kRelu: v = v.max(0.f); break;
    case RnnActKind::kAffine: v = v * a.alpha + a.beta; break;
    case RnnActKind::kLeakyRelu: v = (v >= 0.f).select(v, v * a.alpha); break;
    case RnnActKind::kThresholdedRelu: v = (v > a.alpha).select(v, 0.f); break;
    case RnnActKind::kScaledTanh: v = a.alpha * (v * a.beta).tanh(); break;
    case RnnActKind::kHardSigmoid: v = (v * a.alpha + a.beta).max(0.f).min(1.f); break;
    case RnnActKind::kElu: v = (v >= 0.f).select(v, a.alpha * (v.exp() - 1.f)); break;
    case RnnActKind::kSoftsign: v = v / (1.f + v.abs()); break;
    case RnnActKind::kSoftplus: v = v.max(0.f) + (-v.abs()).exp().log1p(); break;
  }
}

void ClipInPlace(float* x, int64_t n, float clip) {
  Arr v(x, n);
  v = v.max(-clip).min(clip);
}

void ReadSequenceLens(const Node& node, const RnnDims& dims, const void* lens_input,
                      int32_t* lens) {
  for (int64_t b = 0; b < dims.batch; ++b) {
    int64_t len = lens_input ? static_cast<const int32_t*>(lens_input)[b] : dims.seq;
    if (len < 0 || len > dims.seq)
      Fail(StatusCode::kRuntime, node.Describe(), ": sequence_lens[", b, "] = ", len,
           " is outside [0, ", dims.seq, "]");
    lens[b] = static_cast<int32_t>(len);
  }
}

RnnScratch::RnnScratch(const RnnDims& d, int gates)
    : xw(Align16(d.seq * d.batch * gates * d.hidden)),
      gates(Align16(d.batch * gates * d.hidden)),
      state(Align16(d.batch * d.hidden)),
      bias(Align16(4 * d.hidden)),
      batch(d.batch) {}

size_t RnnScratch::bytes() const {
  return sizeof(float) * static_cast<size_t>(xw + gates + 2 * state + bias) +
         sizeof(int32_t) * static_cast<size_t>(batch);
}

RnnRun BeginRnnRun(const Node& node, const RnnParams& params, const RnnScratch& s,
                   const KernelIO& io, int num_outputs) {
  const RnnDims& dims = params.dims;
  RnnRun r;
  r.x = static_cast<const float*>(io.inputs[0]);
  r.w = static_cast<const float*>(io.inputs[1]);
  r.r = static_cast<const float*>(io.inputs[2]);
  r.b = params.has_bias ? static_cast<const float*>(io.inputs[3]) : nullptr;
  r.init_h = params.has_init_h ? static_cast<const float*>(io.inputs[5]) : nullptr;
  r.y = static_cast<float*>(io.outputs[0]);
  r.y_h = num_outputs > 1 ? static_cast<float*>(io.outputs[1]) : nullptr;
  r.xw = static_cast<float*>(io.scratch);
  r.gates = r.xw + s.xw;
  r.state[0] = r.gates + s.gates;
  r.state[1] = r.state[0] + s.state;
  r.bias = r.state[1] + s.state;
  r.lens = reinterpret_cast<int32_t*>(r.bias + s.bias);
  ReadSequenceLens(node, dims, params.has_lens ? io.inputs[4] : nullptr, r.lens);
  bool padded = false;
  for (int64_t b = 0; b < dims.batch; ++b) padded |= r.lens[b] != dims.seq;
  if (r.y && padded) std::memset(r.y, 0, sizeof(float) * dims.seq * dims.dirs * dims.batch * dims.hidden);
  return r;
}

void RegisterRnnKernels(KernelRegistry& r) {
  r.Register(OpId::kLSTM, {DType::kFloat32}, &MakeLstmKernel);
  r.Register(OpId::kGRU, {DType::kFloat32}, &MakeGruKernel);
}

}  // namespace cpu
}  // namespace kaiwu
