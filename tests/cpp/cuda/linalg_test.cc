// CUDA Gemm, MatMul, LSTM and GRU against the CPU kernels on the same random
// inputs. Tolerance rtol 1e-4, atol 1e-5: float32 GEMMs whose summation order
// differs (cuBLAS against the CPU Sgemm). Weight-like operands are uniform in
// +-1/sqrt(fan_in), as a layer's initialisation, so that sums over K = 257
// stay O(1) and the comparison stays meaningful.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "cuda_harness.h"
#include "half_harness.h"

namespace kaiwu {
namespace testing {
namespace {

constexpr float kRtol = 1e-4f, kAtol = 1e-5f;

// Runs `node` on the CPU and on CUDA and compares every output.
void ExpectCudaMatchesCpu(const Node& node, const std::vector<Tensor>& inputs,
                          const std::string& what, float rtol = kRtol, float atol = kAtol) {
  std::vector<Tensor> want = RunNode(node, inputs);
  std::vector<Tensor> got = RunNodeCuda(node, inputs);
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ExpectTensorsClose(got[i], want[i], rtol, atol, what + " output " + std::to_string(i));
}

// Expects RunNodeCuda to fail with `code`.
// Uniform in +-1/sqrt(fan_in).
Tensor WeightTensor(Shape shape, int64_t fan_in, std::mt19937& rng) {
  const float s = 1.f / std::sqrt(static_cast<float>(std::max<int64_t>(fan_in, 1)));
  return RandomTensor(std::move(shape), rng, -s, s);
}

std::map<std::string, Attribute> FusedAct(const std::string& name, float alpha = 0.f,
                                          float beta = 0.f) {
  return {{"_kaiwu_act", StrAttr(name)}, {"_kaiwu_act_params", FloatsAttr({alpha, beta})}};
}

// ---- Gemm

struct GemmCase {
  int64_t m = 1, k = 1, n = 1;
  bool trans_a = false, trans_b = false;
  float alpha = 1.f, beta = 1.f;
  bool has_c = true;
  Shape c;                                 // C's shape when has_c
  std::map<std::string, Attribute> extra;  // e.g. a fused activation
};

void CheckGemm(const GemmCase& g, std::mt19937& rng, const std::string& what) {
  std::map<std::string, Attribute> attrs = g.extra;
  attrs["transA"] = IntAttr(g.trans_a);
  attrs["transB"] = IntAttr(g.trans_b);
  attrs["alpha"] = FloatAttr(g.alpha);
  attrs["beta"] = FloatAttr(g.beta);
  std::vector<Tensor> in{RandomTensor(g.trans_a ? Shape{g.k, g.m} : Shape{g.m, g.k}, rng),
                         WeightTensor(g.trans_b ? Shape{g.n, g.k} : Shape{g.k, g.n}, g.k, rng)};
  if (g.has_c) in.push_back(RandomTensor(g.c, rng));
  Node node = MakeNode("Gemm", static_cast<int>(in.size()), 1, attrs);
  ExpectCudaMatchesCpu(node, in, what);
}

TEST(CudaLinalg, GemmTransposesAndSizes) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(101);
  const int64_t sizes[][3] = {{1, 3, 18},    {7, 257, 256}, {130, 257, 18},
                              {130, 3, 256}, {1, 257, 256}, {7, 3, 18}};
  for (const auto& s : sizes)
    for (int ta : {0, 1})
      for (int tb : {0, 1}) {
        GemmCase g;
        g.m = s[0], g.k = s[1], g.n = s[2];
        g.trans_a = ta, g.trans_b = tb;
        g.c = {g.n};
        g.alpha = ta ? 0.75f : 1.f;
        g.beta = tb ? -1.25f : 1.f;
        CheckGemm(g, rng,
                  "Gemm M " + std::to_string(g.m) + " K " + std::to_string(g.k) + " N " +
                      std::to_string(g.n) + " transA " + std::to_string(ta) + " transB " +
                      std::to_string(tb));
      }
}

TEST(CudaLinalg, GemmBiasBroadcast) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(102);
  const int64_t m = 7, k = 33, n = 18;
  const std::vector<std::pair<std::string, Shape>> c_shapes = {
      {"scalar", {}},     {"[1]", {1}},       {"[N]", {n}},      {"[1, N]", {1, n}},
      {"[M, 1]", {m, 1}}, {"[M, N]", {m, n}}, {"[1, 1]", {1, 1}}};
  for (const auto& [name, shape] : c_shapes)
    for (float beta : {1.f, 0.5f}) {
      GemmCase g;
      g.m = m, g.k = k, g.n = n;
      g.trans_b = true;
      g.alpha = 1.5f;
      g.beta = beta;
      g.c = shape;
      CheckGemm(g, rng, "Gemm C " + name + " beta " + std::to_string(beta));
    }
  GemmCase no_c;
  no_c.m = m, no_c.k = k, no_c.n = n;
  no_c.has_c = false;
  no_c.alpha = -2.f;
  CheckGemm(no_c, rng, "Gemm without C");
  GemmCase beta0 = no_c;  // beta 0: C is ignored
  beta0.has_c = true;
  beta0.c = {m, n};
  beta0.beta = 0.f;
  CheckGemm(beta0, rng, "Gemm beta 0");
}

TEST(CudaLinalg, GemmFusedActivation) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(103);
  struct Act {
    std::string name;
    float alpha, beta;
  };
  const std::vector<Act> acts = {{"Relu", 0.f, 0.f},     {"Tanh", 0.f, 0.f},
                                 {"Sigmoid", 0.f, 0.f},  {"LeakyRelu", 0.1f, 0.f},
                                 {"Clip", -0.3f, 0.4f},  {"HardSigmoid", 0.2f, 0.5f},
                                 {"HardSwish", 0.f, 0.f}};
  for (const Act& a : acts)
    for (bool has_c : {true, false}) {
      GemmCase g;
      g.m = 130, g.k = 257, g.n = 18;
      g.trans_b = true;
      g.has_c = has_c;
      g.c = {g.n};
      g.extra = FusedAct(a.name, a.alpha, a.beta);
      CheckGemm(g, rng, "Gemm fused " + a.name + (has_c ? " with C" : " without C"));
    }
}

TEST(CudaLinalg, GemmEmpty) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(104);
  GemmCase k0;  // K = 0: Y = beta * C
  k0.m = 5, k0.k = 0, k0.n = 6;
  k0.c = {6};
  k0.beta = 2.f;
  CheckGemm(k0, rng, "Gemm K 0");
  k0.has_c = false;
  k0.extra = FusedAct("Sigmoid");
  CheckGemm(k0, rng, "Gemm K 0 fused Sigmoid");
  GemmCase m0;
  m0.m = 0, m0.k = 4, m0.n = 6;
  m0.c = {6};
  CheckGemm(m0, rng, "Gemm M 0");
}

// ---- MatMul

void CheckMatMul(const Shape& a, const Shape& b, std::mt19937& rng,
                 std::map<std::string, Attribute> attrs = {}) {
  const int64_t k = a.back();
  Node node = MakeNode("MatMul", 2, 1, std::move(attrs));
  ExpectCudaMatchesCpu(node, {RandomTensor(a, rng), WeightTensor(b, k, rng)},
                       "MatMul " + ShapeToString(a) + " x " + ShapeToString(b));
}

TEST(CudaLinalg, MatMulShapes) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(105);
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{5, 7}, {7, 3}},              // one GEMM
      {{2, 3, 5, 7}, {7, 4}},        // A's batch folds into M
      {{2, 5, 7}, {1, 7, 4}},        // B of batch 1 folds too
      {{2, 1, 5, 7}, {3, 7, 4}},     // partial broadcast: a GEMM per batch index
      {{2, 3, 5, 7}, {3, 7, 4}},     // B broadcast along the first dim: loop
      {{3, 1, 5, 7}, {1, 2, 7, 4}},  // both broadcast: loop
      {{2, 3, 5, 7}, {2, 3, 7, 4}},  // equal batches: strided batched
      {{3, 5, 7}, {1, 3, 7, 4}},     // equal batch elements, different ranks
      {{5, 7}, {2, 7, 4}},           // one A for every batch: stride 0
      {{1, 5, 7}, {3, 7, 4}},        // likewise
      {{7}, {7, 3}},                 // 1-D x 2-D
      {{5, 7}, {7}},                 // 2-D x 1-D
      {{7}, {7}},                    // dot product
      {{7}, {2, 7, 4}},              // 1-D x batched
      {{2, 5, 7}, {7}},              // batched x 1-D
      {{4, 130, 257}, {257, 256}},   // larger, odd K
      {{3, 64, 128}, {3, 128, 96}},
      {{5, 0}, {0, 3}},  // K = 0: zeros
      {{0, 7}, {7, 3}},  // M = 0: empty
  };
  for (const auto& [a, b] : cases) CheckMatMul(a, b, rng);
}

TEST(CudaLinalg, MatMulFusedActivation) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(106);
  CheckMatMul({2, 3, 5, 7}, {7, 4}, rng, FusedAct("Relu"));
  CheckMatMul({2, 1, 5, 7}, {3, 7, 4}, rng, FusedAct("Tanh"));
  CheckMatMul({2, 5, 7}, {2, 7, 4}, rng, FusedAct("LeakyRelu", 0.2f));
  CheckMatMul({5, 0}, {0, 3}, rng, FusedAct("Sigmoid"));
}

// ---- LSTM and GRU

struct RnnCase {
  std::string op = "LSTM";
  int64_t seq = 3, batch = 2, input = 4, hidden = 5;
  std::string direction = "forward";
  int layout = 0;
  bool bias = true, init = true, peephole = false, input_forget = false;
  int lbr = 0;
  float clip = 0.f;
  std::vector<int32_t> lens;  // empty: absent
  int outputs = 0;            // 0: all (3 for LSTM, 2 for GRU)
  std::vector<std::string> acts;

  std::string Describe() const {
    return op + " seq " + std::to_string(seq) + " batch " + std::to_string(batch) + " input " +
           std::to_string(input) + " hidden " + std::to_string(hidden) + " " + direction +
           " layout " + std::to_string(layout) + " bias " + std::to_string(bias) + " init " +
           std::to_string(init) + " peephole " + std::to_string(peephole) + " input_forget " +
           std::to_string(input_forget) + " lbr " + std::to_string(lbr) + " clip " +
           std::to_string(clip) + " lens " + std::to_string(!lens.empty()) + " outputs " +
           std::to_string(outputs);
  }
};

// The node and random inputs of a case.
std::pair<Node, std::vector<Tensor>> MakeRnn(const RnnCase& c, std::mt19937& rng) {
  const bool lstm = c.op == "LSTM";
  const int64_t dirs = c.direction == "bidirectional" ? 2 : 1, G = (lstm ? 4 : 3) * c.hidden;
  const Shape xs = c.layout == 0 ? Shape{c.seq, c.batch, c.input} : Shape{c.batch, c.seq, c.input};
  const Shape st = c.layout == 0 ? Shape{dirs, c.batch, c.hidden} : Shape{c.batch, dirs, c.hidden};
  std::vector<Tensor> in{RandomTensor(xs, rng),
                         WeightTensor({dirs, G, c.input}, c.input, rng),
                         WeightTensor({dirs, G, c.hidden}, c.hidden, rng),
                         c.bias ? RandomTensor({dirs, 2 * G}, rng, -0.5f, 0.5f) : Tensor(),
                         c.lens.empty() ? Tensor() : MakeTensor<int32_t>({c.batch}, c.lens),
                         c.init ? RandomTensor(st, rng) : Tensor()};
  if (lstm) {
    in.push_back(c.init ? RandomTensor(st, rng) : Tensor());
    in.push_back(c.peephole ? RandomTensor({dirs, 3 * c.hidden}, rng, -0.5f, 0.5f) : Tensor());
  }
  std::map<std::string, Attribute> attrs{{"hidden_size", IntAttr(c.hidden)},
                                         {"direction", StrAttr(c.direction)},
                                         {"layout", IntAttr(c.layout)}};
  if (lstm)
    attrs["input_forget"] = IntAttr(c.input_forget);
  else
    attrs["linear_before_reset"] = IntAttr(c.lbr);
  if (c.clip > 0) attrs["clip"] = FloatAttr(c.clip);
  if (!c.acts.empty()) {
    Attribute a;
    a.kind = Attribute::Kind::kStrings;
    a.strings = c.acts;
    attrs["activations"] = a;
  }
  const int outputs = c.outputs ? c.outputs : (lstm ? 3 : 2);
  return {MakeNode(c.op, static_cast<int>(in.size()), outputs, attrs), in};
}

void CheckRnn(const RnnCase& c, std::mt19937& rng) {
  auto [node, in] = MakeRnn(c, rng);
  ExpectCudaMatchesCpu(node, in, c.Describe());
}

TEST(CudaLinalg, LstmShapes) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(201);
  int variant = 0;
  for (int64_t seq : {1, 7})
    for (int64_t batch : {1, 5})
      for (int64_t hidden : {16, 256})
        for (const char* dir : {"forward", "reverse", "bidirectional"})
          for (int layout : {0, 1}) {
            RnnCase c;
            c.seq = seq, c.batch = batch, c.hidden = hidden;
            c.input = hidden == 256 ? 256 : 10;
            c.direction = dir;
            c.layout = layout;
            c.init = variant % 2 == 0;
            c.bias = variant % 3 != 0;
            ++variant;
            CheckRnn(c, rng);
          }
}

TEST(CudaLinalg, LstmOptions) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(202);
  for (const char* dir : {"forward", "bidirectional"})
    for (int layout : {0, 1})
      for (int variant = 0; variant < 6; ++variant) {
        RnnCase c;
        c.seq = 7, c.batch = 5, c.input = 12, c.hidden = 16;
        c.direction = dir;
        c.layout = layout;
        c.peephole = variant % 2 == 0;
        c.clip = variant % 3 == 1 ? 0.7f : 0.f;
        c.input_forget = variant >= 3;
        c.init = variant != 4;
        c.bias = variant != 5;
        CheckRnn(c, rng);
      }
}

TEST(CudaLinalg, LstmImpalaSizes) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(203);
  for (int64_t batch : {1, 64, 256}) {
    RnnCase c;  // the IMPALA policy core: one step, H = I = 256
    c.seq = 1, c.batch = batch, c.input = 256, c.hidden = 256;
    c.layout = batch == 64 ? 1 : 0;
    CheckRnn(c, rng);
  }
}

TEST(CudaLinalg, LstmSequenceLensAndOutputs) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(204);
  for (int layout : {0, 1}) {
    RnnCase c;
    c.seq = 7, c.batch = 5, c.input = 6, c.hidden = 16;
    c.direction = "bidirectional";
    c.layout = layout;
    c.peephole = layout == 1;
    c.lens = {7, 3, 0, 1, 6};  // padded steps of Y are zeros; Y_h of an empty row is initial_h
    CheckRnn(c, rng);
  }
  for (int outputs : {1, 2}) {
    RnnCase c;
    c.seq = 4, c.batch = 3, c.hidden = 8;
    c.direction = "reverse";
    c.outputs = outputs;
    CheckRnn(c, rng);
  }
  RnnCase named;  // the default functions named explicitly, in any case
  named.acts = {"sigmoid", "TANH", "Tanh"};
  CheckRnn(named, rng);
}

TEST(CudaLinalg, GruVariants) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(205);
  int variant = 0;
  for (int lbr : {0, 1})
    for (const char* dir : {"forward", "reverse", "bidirectional"})
      for (int layout : {0, 1}) {
        RnnCase c;
        c.op = "GRU";
        c.seq = variant % 3 == 0 ? 1 : 7;
        c.batch = 5, c.input = 10, c.hidden = 16;
        c.lbr = lbr;
        c.direction = dir;
        c.layout = layout;
        c.init = variant % 2 == 0;
        c.bias = variant % 4 != 1;
        c.clip = variant % 5 == 2 ? 0.6f : 0.f;
        ++variant;
        CheckRnn(c, rng);
      }
  for (int lbr : {0, 1}) {
    RnnCase big;
    big.op = "GRU";
    big.seq = 3, big.batch = 64, big.input = 256, big.hidden = 256;
    big.lbr = lbr;
    big.direction = "bidirectional";
    CheckRnn(big, rng);
    RnnCase lens;
    lens.op = "GRU";
    lens.seq = 6, lens.batch = 4, lens.hidden = 16;
    lens.lbr = lbr;
    lens.direction = "bidirectional";
    lens.layout = lbr;
    lens.lens = {6, 0, 2, 5};
    lens.clip = 0.5f;
    CheckRnn(lens, rng);
    RnnCase y_only = lens;
    y_only.lens.clear();
    y_only.outputs = 1;
    CheckRnn(y_only, rng);
  }
}

// The GRU sequence kernel (linear_before_reset, hidden <= 128, hidden % 4 == 0)
// at batches that pick 1, 2 and 4 rows per block on a GPU of 132 SMs (H100),
// with a last block part full, ended sequences and clip; 1100 runs the per-step
// path (above the sequence kernel's batch limit).
TEST(CudaLinalg, GruSequenceKernelRowsPerBlock) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(208);
  for (int64_t batch : {1, 2, 3, 133, 301, 1100})
    for (int64_t hidden : {128, 48}) {
      RnnCase c;
      c.op = "GRU";
      c.lbr = 1;
      c.seq = batch > 300 ? 3 : 5;
      c.batch = batch, c.input = 24, c.hidden = hidden;
      c.direction = batch % 2 ? "forward" : "bidirectional";
      c.layout = hidden == 48 ? 1 : 0;
      c.clip = batch == 301 ? 0.9f : 0.f;
      if (batch == 133 || batch == 3) {
        c.lens.resize(batch);
        for (int64_t b = 0; b < batch; ++b) c.lens[b] = static_cast<int32_t>((b * 7) % (c.seq + 1));
      }
      CheckRnn(c, rng);
    }
}

// Node::tf32_gemms (a half session's recurrent nodes): cuBLAS GEMMs round their
// operands to TF32 and the GRU sequence kernel runs h * R^T on tensor cores with
// FP16 operands (hidden % 16 == 0; 40 falls back to the float32 kernel); state
// and gate math stay float32, so the outputs stay within that rounding of the
// float32 kernels. Batches 1, 17 (a part-full second block), 300 and 1100, with
// ended sequences and clip.
TEST(CudaLinalg, RnnTf32Gemms) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(209);
  for (const char* op : {"LSTM", "GRU"})
    for (int64_t batch : {1, 17, 300, 1100})
      for (int64_t hidden : {128, 48, 40}) {
        if (batch == 1100 && hidden != 128) continue;
        RnnCase c;
        c.op = op;
        c.lbr = 1;
        c.seq = batch == 1100 ? 3 : 5, c.batch = batch, c.input = 96, c.hidden = hidden;
        c.layout = hidden == 48 ? 1 : 0;
        c.direction = batch == 17 ? "bidirectional" : "forward";
        c.clip = batch == 300 ? 0.8f : 0.f;
        if (batch == 17 || batch == 1100) {
          c.lens.resize(batch);
          for (int64_t b = 0; b < batch; ++b) c.lens[b] = static_cast<int32_t>((b * 5) % (c.seq + 1));
        }
        auto [node, in] = MakeRnn(c, rng);
        node.tf32_gemms = true;
        ExpectCudaMatchesCpu(node, in, c.Describe() + " tf32", 2e-2f, 3e-3f);
      }
}

// A half session's recurrent node, tf32_gemms set: `op` with linear_before_reset,
// 5 steps, batch 17 bidirectional in layout 1 with ended sequences (Y's zeroed
// steps), other batches forward in layout 0; run on CUDA with inputs [0,
// first_f32) narrowed to `dt` (X, W; R too with first_f32 3) against the float32
// CPU kernel on the rounded values (CheckHalf), the tolerance of RnnTf32Gemms.
void CheckHalfRnn(const char* op, int64_t batch, int64_t input, int64_t hidden, DType dt,
                  int first_f32, std::mt19937& rng, const std::string& what) {
  RnnCase c;
  c.op = op;
  c.lbr = 1;
  c.seq = 5, c.batch = batch, c.input = input, c.hidden = hidden;
  c.layout = batch == 17 ? 1 : 0;
  c.direction = batch == 17 ? "bidirectional" : "forward";
  if (batch == 17) {
    c.lens.resize(batch);
    for (int64_t b = 0; b < batch; ++b) c.lens[b] = static_cast<int32_t>((b * 5) % (c.seq + 1));
  }
  auto [node, in] = MakeRnn(c, rng);
  node.tf32_gemms = true;
  std::vector<int> keep;
  for (int k = first_f32; k < static_cast<int>(in.size()); ++k) keep.push_back(k);
  SCOPED_TRACE(c.Describe() + " " + DTypeName(dt) + what);
  CheckHalf(node, in, dt, 2e-2f, 3e-3f, {}, keep);
}

// Where a half node made X (passes/mixed_precision): X and W float16 / bfloat16,
// Y in that type; R, B, the states and Y_h / Y_c float32. GRU hidden 128 (the
// tensor-core sequence kernels) and 40 (the per-step path), the LSTM; batches 1,
// 17 and 300.
TEST(CudaLinalg, RnnHalfInputProjection) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(212);
  for (DType dt : {DType::kFloat16, DType::kBFloat16})
    for (const char* op : {"LSTM", "GRU"})
      for (int64_t batch : {1, 17, 300})
        for (int64_t hidden : {128, 40}) CheckHalfRnn(op, batch, 96, hidden, dt, 2, rng, "");
}

// An fp16 GRU's R in float16 too (passes/mixed_precision: linear_before_reset,
// hidden <= 128 and a multiple of 16): the tensor-core kernels read its pairs as
// they are (clusters, and KAIWU_GRU_CLUSTER=1's single block), the other paths
// widen it into scratch (hidden 40; KAIWU_GRU_SEQUENCE_MAX_BATCH=0's per-step
// path).
TEST(CudaLinalg, GruFloat16R) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(214);
  const std::vector<std::pair<const char*, const char*>> envs = {
      {nullptr, nullptr}, {"KAIWU_GRU_CLUSTER", "1"}, {"KAIWU_GRU_SEQUENCE_MAX_BATCH", "0"}};
  for (const auto& [name, value] : envs) {
    if (name) ASSERT_EQ(setenv(name, value, 1), 0);
    const std::string what = name ? std::string(" ") + name + "=" + value : std::string();
    for (int64_t batch : {1, 17, 300})
      for (int64_t hidden : {128, 48, 40})
        CheckHalfRnn("GRU", batch, 64, hidden, DType::kFloat16, 3, rng, what);
    if (name) unsetenv(name);
  }
}

// The tensor-core GRU sequence kernel split over clusters of 4 and 2 blocks
// (sm_90; KAIWU_GRU_CLUSTER caps the size, 1 = the single-block kernel) against
// the float32 CPU kernel: hidden 128 / 64 / 32 (4 blocks) and 48 (2), batches
// 1, 17 (a part-full tile) and 300, ended sequences, clip, both directions and
// layouts; 1100 rows are more clusters than fit, so no split.
TEST(CudaLinalg, GruSequenceCluster) {
  KAIWU_REQUIRE_CUDA();
  int device = 0, major = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
  std::mt19937 rng(210);
  for (int cap : {4, 2, 1}) {
    ASSERT_EQ(setenv("KAIWU_GRU_CLUSTER", std::to_string(cap).c_str(), 1), 0);
    if (major >= 9) {
      EXPECT_EQ(cuda::GruSequenceClusterSize(1, 128), cap);
      EXPECT_EQ(cuda::GruSequenceClusterSize(17, 48), std::min(cap, 2));
      EXPECT_EQ(cuda::GruSequenceClusterSize(1100 * 16, 128), 1);
    }
    for (int64_t batch : {1, 17, 300})
      for (int64_t hidden : {128, 64, 48, 32}) {
        RnnCase c;
        c.op = "GRU";
        c.lbr = 1;
        c.seq = 6, c.batch = batch, c.input = 40, c.hidden = hidden;
        c.layout = hidden == 48 ? 1 : 0;
        c.direction = batch == 17 ? "bidirectional" : hidden == 64 ? "reverse" : "forward";
        c.clip = hidden == 32 ? 0.7f : 0.f;
        c.init = batch != 300;
        if (batch != 1) {
          c.lens.resize(batch);
          for (int64_t b = 0; b < batch; ++b) c.lens[b] = static_cast<int32_t>((b * 5) % (c.seq + 1));
        }
        auto [node, in] = MakeRnn(c, rng);
        node.tf32_gemms = true;
        ExpectCudaMatchesCpu(node, in, c.Describe() + " cluster cap " + std::to_string(cap), 2e-2f, 3e-3f);
      }
  }
  unsetenv("KAIWU_GRU_CLUSTER");
}

// The kernels read initial_h / initial_c and write Y_h / Y_c themselves (the
// tests above); KAIWU_RNN_FOLD_STATES=0 keeps the separate load and store
// kernels: both paths, per-step and sequence kernels, against the CPU.
TEST(CudaLinalg, RnnStatesUnfolded) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(211);
  ASSERT_EQ(setenv("KAIWU_RNN_FOLD_STATES", "0", 1), 0);
  for (const char* op : {"LSTM", "GRU"})
    for (int lbr : {0, 1})
      for (int layout : {0, 1}) {
        if (std::string(op) == "LSTM" && lbr == 1) continue;
        RnnCase c;
        c.op = op;
        c.lbr = lbr;
        c.seq = 5, c.batch = 6, c.input = 12, c.hidden = 32;
        c.direction = layout ? "bidirectional" : "reverse";
        c.layout = layout;
        c.init = layout == 0 || lbr == 0;
        c.lens = {5, 0, 2, 3, 1, 4};
        CheckRnn(c, rng);
      }
  unsetenv("KAIWU_RNN_FOLD_STATES");
}

TEST(CudaLinalg, RnnBadSequenceLens) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(206);
  for (const char* op : {"LSTM", "GRU"}) {
    RnnCase c;
    c.op = op;
    c.lens = {3, 4};  // 4 > seq: bad data, found on the device
    auto [node, in] = MakeRnn(c, rng);
    ExpectCudaError(node, in, StatusCode::kRuntime, std::string(op) + " sequence_lens 4 > seq 3");
  }
}

TEST(CudaLinalg, Unsupported) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(207);
  RnnCase lstm;
  lstm.acts = {"Relu", "Tanh", "Tanh"};
  auto [node, in] = MakeRnn(lstm, rng);
  ExpectCudaError(node, in, StatusCode::kUnsupported, "LSTM with a Relu gate activation");
  RnnCase gru;
  gru.op = "GRU";
  gru.direction = "bidirectional";
  gru.acts = {"Sigmoid", "Tanh", "Sigmoid", "Softsign"};
  auto [gru_node, gru_in] = MakeRnn(gru, rng);
  ExpectCudaError(gru_node, gru_in, StatusCode::kUnsupported, "GRU with a Softsign activation");
  Tensor a = MakeTensor<double>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = MakeTensor<double>({3, 2}, {1, 2, 3, 4, 5, 6});
  ExpectCudaError(MakeNode("Gemm", 2, 1), {a, b}, StatusCode::kUnsupported, "Gemm on float64");
  ExpectCudaError(MakeNode("MatMul", 2, 1), {a, b}, StatusCode::kUnsupported, "MatMul on float64");
}

}  // namespace
}  // namespace testing
}  // namespace kaiwu
