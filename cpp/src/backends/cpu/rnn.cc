// Registration of the recurrent kernels and the parts LSTM and GRU share:
// input validation, activation functions, sequence lengths.
#include <Eigen/Core>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/rnn_common.h"

namespace kaiwu {
namespace cpu {

namespace {

using Arr = Eigen::Map<Eigen::ArrayXf>;

struct ActSpec {
  const char* name;
  ActKind kind;
  bool uses_alpha, uses_beta;
  float alpha, beta;  // defaults
};

constexpr ActSpec kActs[] = {
    {"sigmoid", ActKind::kSigmoid, false, false, 0.f, 0.f},
    {"tanh", ActKind::kTanh, false, false, 0.f, 0.f},
    {"relu", ActKind::kRelu, false, false, 0.f, 0.f},
    {"affine", ActKind::kAffine, true, true, 1.f, 0.f},
    {"leakyrelu", ActKind::kLeakyRelu, true, false, 0.01f, 0.f},
    {"thresholdedrelu", ActKind::kThresholdedRelu, true, false, 1.f, 0.f},
    {"scaledtanh", ActKind::kScaledTanh, true, true, 1.f, 1.f},
    {"hardsigmoid", ActKind::kHardSigmoid, true, true, 0.2f, 0.5f},
    {"elu", ActKind::kElu, true, false, 1.f, 0.f},
    {"softsign", ActKind::kSoftsign, false, false, 0.f, 0.f},
    {"softplus", ActKind::kSoftplus, false, false, 0.f, 0.f},
};

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

void ApplyActivation(const Activation& a, float* x, int64_t n) {
  Arr v(x, n);
  switch (a.kind) {
    case ActKind::kSigmoid: v = v.logistic(); break;
    case ActKind::kTanh: v = v.tanh(); break;
    case ActKind::kRelu: v = v.max(0.f); break;
    case ActKind::kAffine: v = v * a.alpha + a.beta; break;
    case ActKind::kLeakyRelu: v = (v >= 0.f).select(v, v * a.alpha); break;
    case ActKind::kThresholdedRelu: v = (v > a.alpha).select(v, 0.f); break;
    case ActKind::kScaledTanh: v = a.alpha * (v * a.beta).tanh(); break;
    case ActKind::kHardSigmoid: v = (v * a.alpha + a.beta).max(0.f).min(1.f); break;
    case ActKind::kElu: v = (v >= 0.f).select(v, a.alpha * (v.exp() - 1.f)); break;
    case ActKind::kSoftsign: v = v / (1.f + v.abs()); break;
    case ActKind::kSoftplus: v = v.max(0.f) + (-v.abs()).exp().log1p(); break;
  }
}

void ClipInPlace(float* x, int64_t n, float clip) {
  Arr v(x, n);
  v = v.max(-clip).min(clip);
}

RnnDims PrepareRnn(PrepareContext& ctx, int gates) {
  const Node& node = ctx.node;
  RnnDims d;
  for (int i : {0, 1, 2}) {
    if (!ctx.HasInput(i)) ctx.Error("input ", i, " is required");
    ctx.ExpectDType(i, {DType::kFloat32});
  }
  std::string direction = node.GetString("direction", "forward");
  if (direction == "bidirectional") d.dirs = 2;
  else if (direction == "reverse") d.reverse = true;
  else if (direction != "forward") ctx.Error("unknown direction '", direction, "'");
  d.layout = static_cast<int>(node.GetInt("layout", 0));
  if (d.layout != 0 && d.layout != 1) ctx.Error("layout must be 0 or 1, got ", d.layout);
  const Shape& x = ctx.in(0).shape;
  if (x.size() != 3) ctx.Error("X must have rank 3, got ", ShapeToString(x));
  d.seq = d.layout == 0 ? x[0] : x[1];
  d.batch = d.layout == 0 ? x[1] : x[0];
  d.input = x[2];
  const Shape& w = ctx.in(1).shape;
  const Shape& r = ctx.in(2).shape;
  if (w.size() != 3 || w[0] != d.dirs || w[2] != d.input || w[1] % gates != 0)
    ctx.Error("W has shape ", ShapeToString(w), ", expected [", d.dirs, ", ", gates,
              "*hidden_size, ", d.input, "]");
  d.hidden = w[1] / gates;
  if (node.Has("hidden_size") && node.GetInt("hidden_size", 0) != d.hidden)
    ctx.Error("hidden_size ", node.GetInt("hidden_size", 0), " does not match W ",
              ShapeToString(w));
  const int64_t gh = gates * d.hidden;
  if (r != Shape{d.dirs, gh, d.hidden})
    ctx.Error("R has shape ", ShapeToString(r), ", expected ", ShapeToString({d.dirs, gh, d.hidden}));
  if (ctx.HasInput(3)) {
    ctx.ExpectDType(3, {DType::kFloat32});
    if (ctx.in(3).shape != Shape{d.dirs, 2 * gh})
      ctx.Error("B has shape ", ShapeToString(ctx.in(3).shape), ", expected ",
                ShapeToString({d.dirs, 2 * gh}));
    d.has_bias = true;
  }
  if (ctx.HasInput(4)) {
    ctx.ExpectDType(4, {DType::kInt32});
    if (ctx.in(4).shape != Shape{d.batch})
      ctx.Error("sequence_lens has shape ", ShapeToString(ctx.in(4).shape), ", expected [",
                d.batch, "]");
    d.has_lens = true;
  }
  const Shape state = d.layout == 0 ? Shape{d.dirs, d.batch, d.hidden}
                                    : Shape{d.batch, d.dirs, d.hidden};
  if (ctx.HasInput(5)) {
    ctx.ExpectDType(5, {DType::kFloat32});
    if (ctx.in(5).shape != state)
      ctx.Error("initial_h has shape ", ShapeToString(ctx.in(5).shape), ", expected ",
                ShapeToString(state));
    d.has_init_h = true;
  }
  if (node.Has("clip")) {
    d.has_clip = true;
    d.clip = node.GetFloat("clip", 0.f);
    if (!(d.clip > 0.f)) ctx.Error("clip must be positive, got ", d.clip);
  }
  ctx.SetOutput(0, DType::kFloat32,
                d.layout == 0 ? Shape{d.seq, d.dirs, d.batch, d.hidden}
                              : Shape{d.batch, d.seq, d.dirs, d.hidden});
  if (ctx.outputs.size() > 1) ctx.SetOutput(1, DType::kFloat32, state);
  return d;
}

std::vector<Activation> ParseActivations(const PrepareContext& ctx,
                                         const std::vector<std::string>& defaults,
                                         int64_t dirs) {
  const Node& node = ctx.node;
  const size_t per_dir = defaults.size();
  std::vector<std::string> names;
  auto it = node.attrs.find("activations");
  if (it != node.attrs.end()) names = it->second.strings;
  if (names.empty()) {
    for (int64_t d = 0; d < dirs; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  } else if (names.size() == per_dir && dirs == 2) {
    std::vector<std::string> twice = names;
    names.insert(names.end(), twice.begin(), twice.end());
  } else if (names.size() != per_dir * static_cast<size_t>(dirs)) {
    ctx.Error("activations lists ", names.size(), " functions, expected ",
              per_dir * static_cast<size_t>(dirs));
  }
  std::vector<float> alphas = node.GetFloats("activation_alpha");
  std::vector<float> betas = node.GetFloats("activation_beta");
  size_t ai = 0, bi = 0;
  std::vector<Activation> acts;
  for (const std::string& name : names) {
    const ActSpec* spec = nullptr;
    for (const ActSpec& s : kActs)
      if (Lower(name) == s.name) spec = &s;
    if (!spec) ctx.Error("unsupported activation '", name, "'");
    Activation a;
    a.kind = spec->kind;
    a.alpha = spec->alpha;
    a.beta = spec->beta;
    if (spec->uses_alpha && ai < alphas.size()) a.alpha = alphas[ai];
    if (spec->uses_alpha) ++ai;
    if (spec->uses_beta && bi < betas.size()) a.beta = betas[bi];
    if (spec->uses_beta) ++bi;
    acts.push_back(a);
  }
  return acts;
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

namespace {
int64_t Align16(int64_t n) { return (n + 15) / 16 * 16; }
}  // namespace

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

RnnRun BeginRnnRun(const Node& node, const RnnDims& dims, const RnnScratch& s, const KernelIO& io,
                   int num_outputs) {
  RnnRun r;
  r.x = static_cast<const float*>(io.inputs[0]);
  r.w = static_cast<const float*>(io.inputs[1]);
  r.r = static_cast<const float*>(io.inputs[2]);
  r.b = dims.has_bias ? static_cast<const float*>(io.inputs[3]) : nullptr;
  r.init_h = dims.has_init_h ? static_cast<const float*>(io.inputs[5]) : nullptr;
  r.y = static_cast<float*>(io.outputs[0]);
  r.y_h = num_outputs > 1 ? static_cast<float*>(io.outputs[1]) : nullptr;
  r.xw = static_cast<float*>(io.scratch);
  r.gates = r.xw + s.xw;
  r.state[0] = r.gates + s.gates;
  r.state[1] = r.state[0] + s.state;
  r.bias = r.state[1] + s.state;
  r.lens = reinterpret_cast<int32_t*>(r.bias + s.bias);
  ReadSequenceLens(node, dims, dims.has_lens ? io.inputs[4] : nullptr, r.lens);
  bool padded = false;
  for (int64_t b = 0; b < dims.batch; ++b) padded |= r.lens[b] != dims.seq;
  if (r.y && padded) std::memset(r.y, 0, sizeof(float) * dims.seq * dims.dirs * dims.batch * dims.hidden);
  return r;
}

void RegisterRnnKernels(KernelRegistry& r) {
  r.Register(OpId::kLSTM, kAnyDType, &MakeLstmKernel);
  r.Register(OpId::kGRU, kAnyDType, &MakeGruKernel);
}

}  // namespace cpu
}  // namespace kaiwu
