// Shape inference of LSTM GRU: the inputs both ops share, direction, layout,
// clip, hidden_size and the activations, then each op's own inputs and flags.
#include "ops/rnn.h"

#include <cctype>

#include "ops/op_registry.h"

namespace kaiwu {
namespace {

struct ActSpec {
  const char* name;
  RnnActKind kind;
  bool uses_alpha, uses_beta;
  float alpha, beta;  // defaults
};

constexpr ActSpec kActs[] = {
    {"sigmoid", RnnActKind::kSigmoid, false, false, 0.f, 0.f},
    {"tanh", RnnActKind::kTanh, false, false, 0.f, 0.f},
    {"relu", RnnActKind::kRelu, false, false, 0.f, 0.f},
    {"affine", RnnActKind::kAffine, true, true, 1.f, 0.f},
    {"leakyrelu", RnnActKind::kLeakyRelu, true, false, 0.01f, 0.f},
    {"thresholdedrelu", RnnActKind::kThresholdedRelu, true, false, 1.f, 0.f},
    {"scaledtanh", RnnActKind::kScaledTanh, true, true, 1.f, 1.f},
    {"hardsigmoid", RnnActKind::kHardSigmoid, true, true, 0.2f, 0.5f},
    {"elu", RnnActKind::kElu, true, false, 1.f, 0.f},
    {"softsign", RnnActKind::kSoftsign, false, false, 0.f, 0.f},
    {"softplus", RnnActKind::kSoftplus, false, false, 0.f, 0.f},
};

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

/// Validates X (0), W (1), R (2), B (3), sequence_lens (4), initial_h (5) for an
/// RNN with `gates` gates, reads direction/hidden_size/layout/clip into p and
/// sets outputs Y (0) and Y_h (1).
///
/// X and W may also both be float16 or both bfloat16 (the mixed-precision pass
/// of half device sessions: the input projection reads them in 16 bits); Y then
/// has X's type, and B, the states and Y_h / Y_c stay float32. R is float32, or
/// float16 where X is (a GRU whose recurrent products run on FP16 operands).
/// Backends key the kernel by X's dtype, so one without such a kernel refuses
/// the node.
void InferRnnCommon(OpContext& ctx, int gates, RnnParams& p) {
  const Node& node = ctx.node;
  RnnDims& d = p.dims;
  p.gates = gates;
  for (int i : {0, 1, 2}) {
    if (!ctx.HasInput(i)) ctx.Error("input ", i, " is required");
  }
  ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  const DType x_type = ctx.in(0).dtype;
  if (ctx.in(1).dtype != x_type)
    ctx.Error("W is ", DTypeName(ctx.in(1).dtype), " but X is ", DTypeName(x_type),
              " (X and W share one type)");
  if (x_type == DType::kFloat16 && node.op_type == "GRU")
    ctx.ExpectDType(2, {DType::kFloat32, DType::kFloat16});
  else
    ctx.ExpectDType(2, {DType::kFloat32});
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
    p.has_bias = true;
  }
  if (ctx.HasInput(4)) {
    ctx.ExpectDType(4, {DType::kInt32});
    if (ctx.in(4).shape != Shape{d.batch})
      ctx.Error("sequence_lens has shape ", ShapeToString(ctx.in(4).shape), ", expected [",
                d.batch, "]");
    p.has_lens = true;
  }
  const Shape state = d.layout == 0 ? Shape{d.dirs, d.batch, d.hidden}
                                    : Shape{d.batch, d.dirs, d.hidden};
  if (ctx.HasInput(5)) {
    ctx.ExpectDType(5, {DType::kFloat32});
    if (ctx.in(5).shape != state)
      ctx.Error("initial_h has shape ", ShapeToString(ctx.in(5).shape), ", expected ",
                ShapeToString(state));
    p.has_init_h = true;
  }
  if (node.Has("clip")) {
    d.has_clip = true;
    d.clip = node.GetFloat("clip", 0.f);
    if (!(d.clip > 0.f)) ctx.Error("clip must be positive, got ", d.clip);
  }
  ctx.SetOutput(0, x_type,
                d.layout == 0 ? Shape{d.seq, d.dirs, d.batch, d.hidden}
                              : Shape{d.batch, d.seq, d.dirs, d.hidden});
  if (ctx.outputs.size() > 1) ctx.SetOutput(1, DType::kFloat32, state);
}

/// Parses `activations`, `activation_alpha` and `activation_beta` into p:
/// defaults.size() activations per direction, direction-major.
void ParseActivations(const OpContext& ctx, const std::vector<std::string>& defaults,
                      RnnParams& p) {
  const Node& node = ctx.node;
  const int64_t dirs = p.dims.dirs;
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
  std::vector<RnnActivation>& acts = p.activations;
  acts.clear();
  for (const std::string& name : names) {
    const ActSpec* spec = nullptr;
    for (const ActSpec& s : kActs)
      if (Lower(name) == s.name) spec = &s;
    if (!spec) ctx.Error("unsupported activation '", name, "'");
    RnnActivation a;
    a.kind = spec->kind;
    a.alpha = spec->alpha;
    a.beta = spec->beta;
    if (spec->uses_alpha && ai < alphas.size()) a.alpha = alphas[ai];
    if (spec->uses_alpha) ++ai;
    if (spec->uses_beta && bi < betas.size()) a.beta = betas[bi];
    if (spec->uses_beta) ++bi;
    acts.push_back(a);
  }
  p.activation_names = std::move(names);
}

// "_kaiwu_packed" (passes/prepack_gemm.cc): W and R packed as inputs `first`
// and `first + 1`, [dirs, ceil(gates hidden / 16), input or hidden, 16].
void InferPacked(OpContext& ctx, int first, RnnParams& p) {
  p.packed = ctx.node.GetInt("_kaiwu_packed", 0) != 0;
  if (!p.packed) return;
  const RnnDims& d = p.dims;
  const int64_t panels = (p.gates * d.hidden + 15) / 16;
  for (int i : {first, first + 1}) {
    if (!ctx.HasInput(i)) ctx.Error("packed input ", i, " is required with _kaiwu_packed");
    ctx.ExpectDType(i, {DType::kFloat32});
    const Shape want{d.dirs, panels, i == first ? d.input : d.hidden, 16};
    if (ctx.in(i).shape != want)
      ctx.Error("packed input ", i, " has shape ", ShapeToString(ctx.in(i).shape), ", expected ",
                ShapeToString(want));
  }
}

// LSTM (gate order i, o, f, c): also initial_c (6), peepholes P (7),
// input_forget, and Y_c (2).
void InferLstm(OpContext& ctx) {
  RnnParams& p = ctx.SetParams<RnnParams>();
  InferRnnCommon(ctx, 4, p);
  const RnnDims& d = p.dims;
  const int64_t h = d.hidden;
  const Shape state = ctx.outputs.size() > 1 ? ctx.outputs[1].shape : Shape{};
  p.has_init_c = ctx.HasInput(6);
  if (p.has_init_c) {
    ctx.ExpectDType(6, {DType::kFloat32});
    if (ctx.in(6).shape != (d.layout == 0 ? Shape{d.dirs, d.batch, h}
                                          : Shape{d.batch, d.dirs, h}))
      ctx.Error("initial_c has shape ", ShapeToString(ctx.in(6).shape));
  }
  p.has_peep = ctx.HasInput(7);
  if (p.has_peep) {
    ctx.ExpectDType(7, {DType::kFloat32});
    if (ctx.in(7).shape != Shape{d.dirs, 3 * h})
      ctx.Error("P has shape ", ShapeToString(ctx.in(7).shape), ", expected ",
                ShapeToString({d.dirs, 3 * h}));
  }
  p.input_forget = ctx.node.GetInt("input_forget", 0) != 0;
  InferPacked(ctx, 8, p);
  ParseActivations(ctx, {"Sigmoid", "Tanh", "Tanh"}, p);
  if (ctx.outputs.size() > 2) ctx.SetOutput(2, DType::kFloat32, state);
}

// GRU (gate order z, r, h): linear_before_reset.
void InferGru(OpContext& ctx) {
  RnnParams& p = ctx.SetParams<RnnParams>();
  InferRnnCommon(ctx, 3, p);
  p.linear_before_reset = ctx.node.GetInt("linear_before_reset", 0) != 0;
  InferPacked(ctx, 6, p);
  ParseActivations(ctx, {"Sigmoid", "Tanh"}, p);
}

}  // namespace

void RegisterRnnOps(OpRegistry& r) {
  r.Define(OpId::kLSTM, &InferLstm);
  r.Define(OpId::kGRU, &InferGru);
}

}  // namespace kaiwu
