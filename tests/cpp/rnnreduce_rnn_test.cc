// LSTM and GRU against a naive float64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernel_harness.h"

namespace kaiwu {
namespace {

using testing::FloatAttr;
using testing::FloatsAttr;
using testing::IntAttr;
using testing::MakeNode;
using testing::MakeTensor;
using testing::RandomTensor;
using testing::RunNode;
using testing::StrAttr;

struct Case {
  std::string op = "LSTM";
  int64_t seq = 3, batch = 2, input = 4, hidden = 5;
  std::string direction = "forward";
  int layout = 0;
  bool bias = true, init = true, peephole = false, input_forget = false;
  int lbr = 0;
  float clip = 0.f;
  std::vector<int32_t> lens;  // empty: absent
  std::vector<std::string> acts;
  std::vector<float> alphas, betas;
};

double Act(const std::string& name, double x, double alpha, double beta) {
  if (name == "Sigmoid") return 1 / (1 + std::exp(-x));
  if (name == "Tanh") return std::tanh(x);
  if (name == "Relu") return std::max(x, 0.0);
  if (name == "LeakyRelu") return x >= 0 ? x : alpha * x;
  if (name == "HardSigmoid") return std::clamp(alpha * x + beta, 0.0, 1.0);
  if (name == "Softsign") return x / (1 + std::abs(x));
  if (name == "ScaledTanh") return alpha * std::tanh(beta * x);
  ADD_FAILURE() << "no reference for " << name;
  return 0;
}

struct Refs {
  std::vector<double> y, y_h, y_c;
};

// Naive float64 LSTM/GRU following the ONNX equations literally.
Refs Reference(const Case& c, const std::vector<Tensor>& in) {
  const bool lstm = c.op == "LSTM";
  const int64_t dirs = c.direction == "bidirectional" ? 2 : 1, H = c.hidden, I = c.input;
  const int64_t G = (lstm ? 4 : 3) * H, B = c.batch, S = c.seq;
  const float *x = in[0].As<float>(), *w = in[1].As<float>(), *r = in[2].As<float>();
  auto state_at = [&](int64_t d, int64_t b) { return (c.layout == 0 ? d * B + b : b * dirs + d) * H; };
  // Activations (f, g[, h]) with ONNX alpha/beta consumption.
  std::vector<std::string> names = c.acts;
  if (names.empty()) names = lstm ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                  : std::vector<std::string>{"Sigmoid", "Tanh"};
  if (names.size() < size_t((lstm ? 3 : 2) * dirs)) {
    std::vector<std::string> once = names;
    names.insert(names.end(), once.begin(), once.end());
  }
  std::vector<double> al(names.size()), be(names.size());
  size_t ai = 0, bi = 0;
  for (size_t k = 0; k < names.size(); ++k) {
    bool ua = names[k] == "LeakyRelu" || names[k] == "HardSigmoid" || names[k] == "ScaledTanh";
    bool ub = names[k] == "HardSigmoid" || names[k] == "ScaledTanh";
    al[k] = names[k] == "LeakyRelu" ? 0.01 : names[k] == "HardSigmoid" ? 0.2 : 1.0;
    be[k] = names[k] == "HardSigmoid" ? 0.5 : 1.0;
    if (ua && ai < c.alphas.size()) al[k] = c.alphas[ai];
    if (ua) ++ai;
    if (ub && bi < c.betas.size()) be[k] = c.betas[bi];
    if (ub) ++bi;
  }
  Refs out;
  out.y.assign(S * dirs * B * H, 0.0);
  out.y_h.assign(dirs * B * H, 0.0);
  out.y_c.assign(dirs * B * H, 0.0);
  for (int64_t d = 0; d < dirs; ++d) {
    const bool back = c.direction == "reverse" || d == 1;
    const size_t a0 = d * (lstm ? 3 : 2);
    auto f = [&](double v) { return Act(names[a0], v, al[a0], be[a0]); };
    auto g = [&](double v) { return Act(names[a0 + 1], v, al[a0 + 1], be[a0 + 1]); };
    auto hact = [&](double v) { return lstm ? Act(names[a0 + 2], v, al[a0 + 2], be[a0 + 2]) : v; };
    auto clip = [&](double v) { return c.clip > 0 ? std::clamp(v, -double(c.clip), double(c.clip)) : v; };
    for (int64_t b = 0; b < B; ++b) {
      std::vector<double> h(H, 0.0), cell(H, 0.0);
      if (c.init)
        for (int64_t u = 0; u < H; ++u) {
          h[u] = in[5].As<float>()[state_at(d, b) + u];
          if (lstm) cell[u] = in[6].As<float>()[state_at(d, b) + u];
        }
      int64_t len = c.lens.empty() ? S : c.lens[b];
      for (int64_t s = 0; s < len; ++s) {
        int64_t t = back ? len - 1 - s : s;
        const float* xt = x + (c.layout == 0 ? t * B + b : b * S + t) * I;
        // xw[k], hr[k] for every gate row k, biases separate.
        std::vector<double> xw(G, 0.0), hr(G, 0.0), wb(G, 0.0), rb(G, 0.0);
        for (int64_t k = 0; k < G; ++k) {
          for (int64_t j = 0; j < I; ++j) xw[k] += double(w[(d * G + k) * I + j]) * xt[j];
          for (int64_t j = 0; j < H; ++j) hr[k] += double(r[(d * G + k) * H + j]) * h[j];
          if (c.bias) {
            wb[k] = in[3].As<float>()[d * 2 * G + k];
            rb[k] = in[3].As<float>()[d * 2 * G + G + k];
          }
        }
        std::vector<double> hn(H);
        if (lstm) {
          const float* p = c.peephole ? in[7].As<float>() + d * 3 * H : nullptr;
          for (int64_t u = 0; u < H; ++u) {
            auto pre = [&](int gate) { return xw[gate * H + u] + hr[gate * H + u] + wb[gate * H + u] + rb[gate * H + u]; };
            double i = f(clip(pre(0) + (p ? p[u] * cell[u] : 0)));
            double fg = f(clip(pre(2) + (p ? p[2 * H + u] * cell[u] : 0)));
            if (c.input_forget) fg = 1 - i;
            double cc = g(clip(pre(3)));
            cell[u] = fg * cell[u] + i * cc;
            double o = f(clip(pre(1) + (p ? p[H + u] * cell[u] : 0)));
            hn[u] = o * hact(cell[u]);
          }
        } else {
          std::vector<double> z(H), rr(H);
          for (int64_t u = 0; u < H; ++u) {
            z[u] = f(clip(xw[u] + hr[u] + wb[u] + rb[u]));
            rr[u] = f(clip(xw[H + u] + hr[H + u] + wb[H + u] + rb[H + u]));
          }
          for (int64_t u = 0; u < H; ++u) {
            double lin;
            if (c.lbr) {
              lin = xw[2 * H + u] + wb[2 * H + u] + rr[u] * (hr[2 * H + u] + rb[2 * H + u]);
            } else {
              double acc = 0;
              for (int64_t j = 0; j < H; ++j) acc += double(r[(d * G + 2 * H + u) * H + j]) * rr[j] * h[j];
              lin = xw[2 * H + u] + acc + rb[2 * H + u] + wb[2 * H + u];
            }
            double hh = g(clip(lin));
            hn[u] = (1 - z[u]) * hh + z[u] * h[u];
          }
        }
        h = hn;
        for (int64_t u = 0; u < H; ++u)
          out.y[(c.layout == 0 ? (t * dirs + d) * B + b : (b * S + t) * dirs + d) * H + u] = h[u];
      }
      for (int64_t u = 0; u < H; ++u) {
        out.y_h[state_at(d, b) + u] = h[u];
        out.y_c[state_at(d, b) + u] = cell[u];
      }
    }
  }
  return out;
}

void Compare(const Tensor& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), static_cast<int64_t>(want.size())) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got.As<float>()[i], want[i], 2e-4) << what << " element " << i;
}

void Check(const Case& c, int threads, std::mt19937& rng) {
  const bool lstm = c.op == "LSTM";
  const int64_t dirs = c.direction == "bidirectional" ? 2 : 1, G = (lstm ? 4 : 3) * c.hidden;
  Shape xs = c.layout == 0 ? Shape{c.seq, c.batch, c.input} : Shape{c.batch, c.seq, c.input};
  Shape st = c.layout == 0 ? Shape{dirs, c.batch, c.hidden} : Shape{c.batch, dirs, c.hidden};
  std::vector<Tensor> in{RandomTensor(xs, rng), RandomTensor({dirs, G, c.input}, rng, -0.7f, 0.7f),
                         RandomTensor({dirs, G, c.hidden}, rng, -0.7f, 0.7f),
                         c.bias ? RandomTensor({dirs, 2 * G}, rng) : Tensor(),
                         c.lens.empty() ? Tensor() : MakeTensor<int32_t>({c.batch}, c.lens),
                         c.init ? RandomTensor(st, rng) : Tensor()};
  if (lstm) {
    in.push_back(c.init ? RandomTensor(st, rng) : Tensor());
    in.push_back(c.peephole ? RandomTensor({dirs, 3 * c.hidden}, rng) : Tensor());
  }
  std::map<std::string, Attribute> attrs{{"hidden_size", IntAttr(c.hidden)},
                                         {"direction", StrAttr(c.direction)},
                                         {"layout", IntAttr(c.layout)}};
  if (lstm) attrs["input_forget"] = IntAttr(c.input_forget);
  else attrs["linear_before_reset"] = IntAttr(c.lbr);
  if (c.clip > 0) attrs["clip"] = FloatAttr(c.clip);
  if (!c.acts.empty()) {
    Attribute a;
    a.kind = Attribute::Kind::kStrings;
    a.strings = c.acts;
    attrs["activations"] = a;
  }
  if (!c.alphas.empty()) attrs["activation_alpha"] = FloatsAttr(c.alphas);
  if (!c.betas.empty()) attrs["activation_beta"] = FloatsAttr(c.betas);
  Node node = MakeNode(c.op, static_cast<int>(in.size()), lstm ? 3 : 2, attrs);
  std::vector<Tensor> out = RunNode(node, in, threads);
  Refs want = Reference(c, in);
  std::string what = c.op + " " + c.direction + " layout " + std::to_string(c.layout) +
                     " lbr " + std::to_string(c.lbr) + " threads " + std::to_string(threads);
  Compare(out[0], want.y, what + " Y");
  Compare(out[1], want.y_h, what + " Y_h");
  if (lstm) Compare(out[2], want.y_c, what + " Y_c");
}

TEST(RnnReduceRnn, LstmMatchesReference) {
  std::mt19937 rng(31);
  for (const char* dir : {"forward", "reverse", "bidirectional"})
    for (int layout : {0, 1})
      for (int threads : {1, 3}) {
        Case c;
        c.direction = dir;
        c.layout = layout;
        c.init = (layout + threads) % 2 == 0;
        c.bias = threads == 1 || layout == 0;
        Check(c, threads, rng);
      }
}

TEST(RnnReduceRnn, LstmOptions) {
  std::mt19937 rng(32);
  Case c;
  c.seq = 4, c.batch = 3;
  c.peephole = true;
  c.clip = 0.6f;
  Check(c, 1, rng);
  c.direction = "bidirectional";
  c.input_forget = true;
  c.lens = {4, 2, 0};  // per-batch lengths, padded steps zero
  Check(c, 3, rng);
  c.peephole = false;
  c.clip = 0.f;
  c.acts = {"HardSigmoid", "LeakyRelu", "Softsign", "Sigmoid", "ScaledTanh", "Tanh"};
  c.alphas = {0.3f, 0.05f, 0.9f};
  c.betas = {0.4f, 1.5f};
  Check(c, 1, rng);
  Case big;  // large batch: gate math runs in parallel
  big.batch = 64, big.hidden = 32, big.input = 16, big.seq = 5;
  big.direction = "bidirectional";
  Check(big, 3, rng);
}

TEST(RnnReduceRnn, GruMatchesReference) {
  std::mt19937 rng(33);
  for (const char* dir : {"forward", "reverse", "bidirectional"})
    for (int lbr : {0, 1})
      for (int layout : {0, 1}) {
        Case c;
        c.op = "GRU";
        c.direction = dir;
        c.lbr = lbr;
        c.layout = layout;
        c.init = lbr == layout;
        Check(c, 1 + 2 * lbr, rng);
      }
}

TEST(RnnReduceRnn, GruOptions) {
  std::mt19937 rng(34);
  for (int lbr : {0, 1}) {
    Case c;
    c.op = "GRU";
    c.seq = 5, c.batch = 3, c.lbr = lbr;
    c.direction = "bidirectional";
    c.clip = 0.5f;
    c.lens = {2, 5, 1};
    Check(c, 3, rng);
    c.clip = 0.f;
    c.lens.clear();
    c.acts = {"HardSigmoid", "Softsign"};
    c.alphas = {0.25f};
    Check(c, 1, rng);
    Case big;
    big.op = "GRU";
    big.lbr = lbr;
    big.batch = 64, big.hidden = 32, big.input = 16, big.seq = 4;
    Check(big, 3, rng);
  }
}

TEST(RnnReduceRnn, OmittedOutputs) {
  std::mt19937 rng(35);
  Case c;
  c.direction = "reverse";
  Tensor x = RandomTensor({3, 2, 4}, rng), w = RandomTensor({1, 20, 4}, rng),
         r = RandomTensor({1, 20, 5}, rng);
  Node node = MakeNode("LSTM", 3, 3, {{"hidden_size", IntAttr(5)}, {"direction", StrAttr("reverse")}});
  node.outputs[0] = -1;
  node.outputs[2] = -1;
  PrepareContext ctx(node);
  for (const Tensor* t : {&x, &w, &r})
    ctx.inputs.push_back(TensorInfo{true, DType::kFloat32, t->shape(), nullptr});
  InferOp(ctx);
  auto kernel = PrepareHostKernel(ctx);
  Tensor y_h(DType::kFloat32, {1, 2, 5});
  std::vector<const void*> ins{x.data(), w.data(), r.data()};
  std::vector<void*> outs{nullptr, y_h.data(), nullptr};
  std::vector<char> scratch(ctx.scratch_bytes);
  ThreadPool pool(1);
  kernel->Run(KernelIO{ins.data(), outs.data(), scratch.data(), &pool});
  c.bias = c.init = false;
  Refs want = Reference(c, {x, w, r});
  Compare(y_h, want.y_h, "Y_h only");
}

TEST(RnnReduceRnn, BadInputsThrow) {
  std::mt19937 rng(36);
  Tensor x = RandomTensor({3, 2, 4}, rng), w = RandomTensor({1, 20, 4}, rng),
         r = RandomTensor({1, 20, 5}, rng);
  auto lstm = [](std::map<std::string, Attribute> a) { return MakeNode("LSTM", 3, 3, a); };
  EXPECT_THROW(RunNode(lstm({{"hidden_size", IntAttr(6)}}), {x, w, r}), Error);
  EXPECT_THROW(RunNode(lstm({{"direction", StrAttr("sideways")}}), {x, w, r}), Error);
  EXPECT_THROW(RunNode(lstm({{"direction", StrAttr("bidirectional")}}), {x, w, r}), Error);
  Attribute acts;
  acts.kind = Attribute::Kind::kStrings;
  acts.strings = {"Sigmoid", "Tanh", "Swish"};
  EXPECT_THROW(RunNode(lstm({{"activations", acts}}), {x, w, r}), Error);
  Tensor bad_r = RandomTensor({1, 20, 4}, rng);
  EXPECT_THROW(RunNode(lstm({}), {x, w, bad_r}), Error);
  Node gru = MakeNode("GRU", 5, 2);
  Tensor wg = RandomTensor({1, 15, 4}, rng), rg = RandomTensor({1, 15, 5}, rng);
  Tensor lens = MakeTensor<int32_t>({2}, {3, 4});  // 4 > seq: a runtime error
  try {
    RunNode(gru, {x, wg, rg, Tensor(), lens});
    ADD_FAILURE() << "expected a runtime error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kRuntime);
  }
  Tensor xi = MakeTensor<int32_t>({1, 1, 1}, {1});
  EXPECT_THROW(RunNode(gru, {xi, wg, rg}), Error);
}

}  // namespace
}  // namespace kaiwu
