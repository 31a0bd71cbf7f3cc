// CUDA elementwise kernels against the CPU kernels of the same ops on the same
// random inputs: unary math and activations, Clip, IsNaN/IsInf, broadcasting
// arithmetic, comparisons and logic, Where, Cast, the Softmax family and
// FusedElementwise. Tolerances: exact for results that IEEE float32 (or integer
// and bool math) fixes; rtol 1e-5 / atol 1e-6 where CUDA's libm, FMA
// contraction or a summation order may differ from the CPU's.
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

// RunBoth there (unused here) trips -Wdangling-else through EXPECT_EQ in an unbraced if.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdangling-else"
#include "../elementwise_test_util.h"
#pragma GCC diagnostic pop
#include "cuda_harness.h"

namespace kaiwu {
namespace testing {
namespace {

constexpr float kMathRtol = 1e-5f, kMathAtol = 1e-6f;

// ExpectTensorsClose, with infinities required at the same places with the
// same sign (ExpectTensorsClose would count inf - inf as a difference).
void ExpectClose(const Tensor& got, const Tensor& want, float rtol, float atol,
                 const std::string& what) {
  if (want.dtype() != DType::kFloat32 || got.dtype() != want.dtype() ||
      got.shape() != want.shape())
    return ExpectTensorsClose(got, want, rtol, atol, what);
  Tensor g(DType::kFloat32, got.shape()), w(DType::kFloat32, want.shape());
  int64_t bad = 0;
  for (int64_t i = 0; i < want.size(); ++i) {
    float gv = got.As<float>()[i], wv = want.As<float>()[i];
    if (std::isinf(gv) || std::isinf(wv)) {
      if (gv != wv && bad++ == 0) ADD_FAILURE() << what << ": at " << i << " got " << gv
                                                << ", want " << wv;
      gv = wv = 0.f;
    }
    g.As<float>()[i] = gv;
    w.As<float>()[i] = wv;
  }
  EXPECT_EQ(bad, 0) << what << ": infinities differ";
  ExpectTensorsClose(g, w, rtol, atol, what);
}

std::string Describe(const Node& node, const std::vector<Tensor>& inputs) {
  std::string s = node.op_type;
  for (const Tensor& t : inputs)
    s += std::string(" ") + (t.dtype() == DType::kUndefined
                                 ? "(none)"
                                 : DTypeName(t.dtype()) + ShapeToString(t.shape()));
  return s;
}

// Runs `node` on the CPU (the reference) and on CUDA and compares all outputs.
// Input data is visible to the CUDA Prepare only for `const_inputs`.
void Check(const Node& node, const std::vector<Tensor>& inputs, float rtol, float atol,
           const std::vector<int>& const_inputs = {}) {
  const std::string what = Describe(node, inputs);
  std::vector<Tensor> want = RunNode(node, inputs);
  std::vector<Tensor> got = RunNodeCuda(node, inputs, const_inputs);
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < want.size(); ++k) ExpectClose(got[k], want[k], rtol, atol, what);
}

void ExpectUnsupported(const Node& node, const std::vector<Tensor>& inputs) {
  ExpectCudaError(node, inputs, StatusCode::kUnsupported, Describe(node, inputs));
}

// Float values rounded to halves, so that comparisons and Hardmax see ties.
Tensor Halves(Tensor t) {
  for (int64_t i = 0; i < t.size(); ++i) t.As<float>()[i] = std::round(t.As<float>()[i] * 2) / 2;
  return t;
}

// Shapes beyond BroadcastCases(): trailing block, the brief's mixed cases, rank 5,
// a broadcast output of several blocks.
std::vector<std::pair<Shape, Shape>> MoreBroadcastCases() {
  return {{{2, 3, 4}, {4}},
          {{2, 1, 4}, {3, 1}},
          {{1}, {5, 7}},
          {{2, 3, 1, 4, 5}, {3, 2, 1, 5}},
          {{2, 1, 3, 1, 5}, {1, 1, 4, 5}},
          {{3, 1000}, {1000}},
          {{7, 1, 300}, {1, 5, 1}},
          // Packed broadcast reads (the output's inner dim a multiple of the pack): a
          // mask over attention scores, a column repeated along the inner dim, both
          // inputs broadcast, a trailing block of 8.
          {{6, 5, 16}, {6, 1, 16}},
          {{4, 3, 8}, {4, 3, 1}},
          {{2, 1, 24}, {1, 3, 24}},
          {{5, 8}, {8}}};
}

std::vector<std::pair<Shape, Shape>> AllBroadcastCases() {
  std::vector<std::pair<Shape, Shape>> cases = BroadcastCases();
  for (const auto& c : MoreBroadcastCases()) cases.push_back(c);
  return cases;
}

// ---- unary ------------------------------------------------------------------

struct UnaryCase {
  std::string op;
  std::map<std::string, Attribute> attrs;
  bool exact;
};

TEST(CudaElementwise, UnaryFloatOps) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(11);
  Tensor x = RandomTensor({3, 37, 5}, rng, -3.f, 3.f);
  // Zeros, values near 0 (Log, Sqrt, Reciprocal) and halves (Round) at fixed places.
  const float special[] = {0.f, -0.f, 1e-30f, -1e-30f, 3e-8f, 0.5f, -0.5f,
                           1.5f, 2.5f, -2.5f, 1.f,   -1.f,  -3e-8f};
  for (size_t i = 0; i < sizeof(special) / sizeof(float); ++i) x.As<float>()[i * 7] = special[i];
  const std::vector<UnaryCase> cases = {
      {"Relu", {}, true},
      {"LeakyRelu", {}, true},
      {"LeakyRelu", {{"alpha", FloatAttr(0.3f)}}, true},
      {"Elu", {}, false},
      {"Elu", {{"alpha", FloatAttr(0.7f)}}, false},
      {"Selu", {}, false},
      {"Selu", {{"alpha", FloatAttr(1.5f)}, {"gamma", FloatAttr(2.f)}}, false},
      {"Celu", {}, false},
      {"Celu", {{"alpha", FloatAttr(0.6f)}}, false},
      {"HardSigmoid", {}, false},
      {"HardSigmoid", {{"alpha", FloatAttr(0.3f)}, {"beta", FloatAttr(0.4f)}}, false},
      {"HardSwish", {}, false},
      {"Gelu", {}, false},
      {"Gelu", {{"approximate", StrAttr("none")}}, false},
      {"Gelu", {{"approximate", StrAttr("tanh")}}, false},
      {"ThresholdedRelu", {}, true},
      {"ThresholdedRelu", {{"alpha", FloatAttr(0.4f)}}, true},
      {"Mish", {}, false},
      {"Softplus", {}, false},
      {"Softsign", {}, false},
      {"Sigmoid", {}, false},
      {"Tanh", {}, false},
      {"Neg", {}, true},
      {"Abs", {}, true},
      {"Sign", {}, true},
      {"Sqrt", {}, true},
      {"Exp", {}, false},
      {"Log", {}, false},
      {"Reciprocal", {}, false},
      {"Floor", {}, true},
      {"Ceil", {}, true},
      {"Round", {}, true},
      {"Sin", {}, false},
      {"Cos", {}, false},
      {"Erf", {}, false},
  };
  for (const UnaryCase& c : cases) {
    Node node = MakeNode(c.op, 1, 1, c.attrs);
    if (c.exact) {
      Check(node, {x}, 0.f, 0.f);
    } else {
      Check(node, {x}, kMathRtol, kMathAtol);
    }
  }
}

template <typename T>
Tensor IntsWithExtremes(Shape shape, std::mt19937& rng) {
  Tensor t = RandomOf(DTypeOf<T>::value, std::move(shape), rng, -100, 100);
  t.As<T>()[0] = std::numeric_limits<T>::min();
  t.As<T>()[1] = std::numeric_limits<T>::max();
  t.As<T>()[2] = 0;
  return t;
}

TEST(CudaElementwise, UnaryIntegerOps) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(12);
  for (const char* op : {"Neg", "Abs", "Sign", "Relu"}) {
    Check(MakeNode(op, 1, 1), {IntsWithExtremes<int32_t>({4, 33}, rng)}, 0.f, 0.f);
    Check(MakeNode(op, 1, 1), {IntsWithExtremes<int64_t>({4, 33}, rng)}, 0.f, 0.f);
  }
}

TEST(CudaElementwise, ClipBoundsConstantRuntimeOmittedLegacy) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(13);
  Tensor x = RandomTensor({4, 33}, rng, -3.f, 3.f);
  Tensor lo = MakeTensor<float>({}, {-1.2f}), hi = MakeTensor<float>({1}, {0.7f});
  Node clip = MakeNode("Clip", 3, 1);
  Check(clip, {x, lo, hi}, 0.f, 0.f, {1, 2});  // bounds known at Prepare
  Check(clip, {x, lo, hi}, 0.f, 0.f);          // bounds read on the device
  Check(clip, {x, lo, hi}, 0.f, 0.f, {1});     // one of each
  Check(clip, {x, hi, lo}, 0.f, 0.f);          // min > max: max everywhere
  Check(MakeNode("Clip", 2, 1), {x, lo}, 0.f, 0.f);
  Check(clip, {x, Tensor(), hi}, 0.f, 0.f);
  Check(clip, {x, Tensor(), hi}, 0.f, 0.f, {2});
  Check(MakeNode("Clip", 1, 1), {x}, 0.f, 0.f);

  Node legacy = MakeNode("Clip", 1, 1, {{"min", FloatAttr(-0.5f)}, {"max", FloatAttr(2.f)}});
  legacy.opset = 6;
  Check(legacy, {x}, 0.f, 0.f);
  Node legacy_default = MakeNode("Clip", 1, 1, {{"max", FloatAttr(0.25f)}});
  legacy_default.opset = 6;
  Check(legacy_default, {x}, 0.f, 0.f);

  Tensor xi = RandomOf(DType::kInt32, {4, 33}, rng, -50, 50);
  Tensor loi = MakeTensor<int32_t>({}, {-10}), hii = MakeTensor<int32_t>({}, {20});
  Check(clip, {xi, loi, hii}, 0.f, 0.f);
  Check(clip, {xi, loi, hii}, 0.f, 0.f, {1, 2});
  Tensor xl = RandomOf(DType::kInt64, {4, 33}, rng, -50, 50);
  Tensor lol = MakeTensor<int64_t>({}, {-10}), hil = MakeTensor<int64_t>({}, {20});
  Check(clip, {xl, lol, hil}, 0.f, 0.f);
  Check(clip, {xl, Tensor(), hil}, 0.f, 0.f, {2});
}

TEST(CudaElementwise, IsNaNIsInf) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(14);
  Tensor x = RandomTensor({5, 41}, rng, -3.f, 3.f);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < x.size(); i += 9) x.As<float>()[i] = std::nanf("");
  for (int64_t i = 4; i < x.size(); i += 13) x.As<float>()[i] = inf;
  for (int64_t i = 6; i < x.size(); i += 17) x.As<float>()[i] = -inf;
  Check(MakeNode("IsNaN", 1, 1), {x}, 0.f, 0.f);
  Check(MakeNode("IsInf", 1, 1), {x}, 0.f, 0.f);
  Check(MakeNode("IsInf", 1, 1, {{"detect_positive", IntAttr(0)}}), {x}, 0.f, 0.f);
  Check(MakeNode("IsInf", 1, 1, {{"detect_negative", IntAttr(0)}}), {x}, 0.f, 0.f);
}

// ---- binary arithmetic ------------------------------------------------------------

TEST(CudaElementwise, FloatArithmeticBroadcasting) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(21);
  for (const auto& [sa, sb] : AllBroadcastCases()) {
    Tensor a = RandomOf(DType::kFloat32, sa, rng, -2, 2);
    Tensor b = RandomOf(DType::kFloat32, sb, rng, -2, 2);
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min"}) {
      Check(MakeNode(op, 2, 1), {a, b}, 0.f, 0.f);
      Check(MakeNode(op, 2, 1), {b, a}, 0.f, 0.f);
    }
    Node fmod = MakeNode("Mod", 2, 1, {{"fmod", IntAttr(1)}});
    Check(fmod, {a, b}, 0.f, 0.f);
    Check(fmod, {b, a}, 0.f, 0.f);
    Check(MakeNode("Pow", 2, 1), {a, b}, kMathRtol, kMathAtol);
    Check(MakeNode("Pow", 2, 1), {b, a}, kMathRtol, kMathAtol);
  }
}

TEST(CudaElementwise, IntegerArithmeticBroadcasting) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(22);
  for (DType dt : {DType::kInt32, DType::kInt64}) {
    for (const auto& [sa, sb] : AllBroadcastCases()) {
      Tensor a = RandomOf(dt, sa, rng, -50, 50, /*nonzero=*/true);
      Tensor b = RandomOf(dt, sb, rng, -50, 50, /*nonzero=*/true);
      for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min"}) {
        Check(MakeNode(op, 2, 1), {a, b}, 0.f, 0.f);
        Check(MakeNode(op, 2, 1), {b, a}, 0.f, 0.f);
      }
      for (int64_t fmod : {0, 1}) {
        Check(MakeNode("Mod", 2, 1, {{"fmod", IntAttr(fmod)}}), {a, b}, 0.f, 0.f);
        Check(MakeNode("Mod", 2, 1, {{"fmod", IntAttr(fmod)}}), {b, a}, 0.f, 0.f);
      }
    }
  }
}

template <typename T>
void CheckIntegerEdges() {
  const T lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  Tensor a = MakeTensor<T>({8}, {lo, hi, lo, hi, 7, -7, 7, -7});
  Tensor b = MakeTensor<T>({8}, {-1, 1, 2, -1, 2, 2, -2, -2});
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) Check(MakeNode(op, 2, 1), {a, b}, 0.f, 0.f);
  for (int64_t fmod : {0, 1})
    Check(MakeNode("Mod", 2, 1, {{"fmod", IntAttr(fmod)}}), {a, b}, 0.f, 0.f);
}

TEST(CudaElementwise, IntegerArithmeticWrapsAndRounds) {
  KAIWU_REQUIRE_CUDA();
  CheckIntegerEdges<int32_t>();
  CheckIntegerEdges<int64_t>();
}

TEST(CudaElementwise, IntegerDivisionByZeroFailsAtRun) {
  KAIWU_REQUIRE_CUDA();
  Tensor a = MakeTensor<int32_t>({4}, {1, 2, 3, 4});
  Tensor b = MakeTensor<int32_t>({4}, {1, 0, 1, 1});
  for (const char* op : {"Div", "Mod"}) {
    Node node = MakeNode(op, 2, 1);
    EXPECT_THROW(RunNode(node, {a, b}), Error);
    try {
      RunNodeCuda(node, {a, b});
      ADD_FAILURE() << op << ": no error for a zero divisor";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kRuntime) << e.what();
    }
  }
}

TEST(CudaElementwise, VariadicMaxMinSumMean) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(23);
  const std::vector<Shape> shapes = {{2, 3, 4}, {4}, {3, 1}, {1}};
  for (size_t n = 1; n <= shapes.size(); ++n) {
    std::vector<Tensor> f, i;
    for (size_t k = 0; k < n; ++k) {
      f.push_back(RandomOf(DType::kFloat32, shapes[k], rng, -2, 2));
      i.push_back(RandomOf(DType::kInt32, shapes[k], rng, -20, 20));
    }
    const int arity = static_cast<int>(n);
    for (const char* op : {"Max", "Min"}) {
      Check(MakeNode(op, arity, 1), f, 0.f, 0.f);
      Check(MakeNode(op, arity, 1), i, 0.f, 0.f);
    }
    Check(MakeNode("Sum", arity, 1), f, 0.f, 0.f);
    Check(MakeNode("Mean", arity, 1), f, kMathRtol, kMathAtol);
  }
}

TEST(CudaElementwise, PowExponentsAndDtypes) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(24);
  Node pow = MakeNode("Pow", 2, 1);
  Tensor x = RandomOf(DType::kFloat32, {3, 4, 5}, rng, -2, 2);
  for (float e : {2.f, 3.f, 1.f, 0.5f, 1.7f, -1.f, 0.f})
    Check(pow, {x, MakeTensor<float>({}, {e})}, kMathRtol, kMathAtol);
  Check(pow, {x, MakeTensor<int32_t>({1}, {3})}, kMathRtol, kMathAtol);
  Check(pow, {x, RandomOf(DType::kInt32, {5}, rng, -3, 4)}, kMathRtol, kMathAtol);
  Check(pow, {x, RandomOf(DType::kInt64, {4, 1}, rng, -3, 4)}, kMathRtol, kMathAtol);
  for (DType base : {DType::kInt32, DType::kInt64}) {
    for (DType exp : {DType::kInt32, DType::kInt64}) {
      Tensor b = RandomOf(base, {3, 4, 5}, rng, -5, 6);
      Check(pow, {b, RandomOf(exp, {4, 5}, rng, -2, 9)}, 0.f, 0.f);
      Check(pow, {b, RandomOf(exp, {}, rng, 2, 3)}, 0.f, 0.f);
    }
  }
}

TEST(CudaElementwise, PRelu) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(25);
  for (DType dt : {DType::kFloat32, DType::kInt32, DType::kInt64}) {
    Tensor x = RandomOf(dt, {2, 3, 4, 5}, rng, -9, 9);
    for (Shape slope : {Shape{3, 1, 1}, Shape{5}, Shape{}, Shape{2, 3, 4, 5}, Shape{1, 4, 1}})
      Check(MakeNode("PRelu", 2, 1), {x, RandomOf(dt, slope, rng, -3, 3)}, 0.f, 0.f);
  }
}

// ---- comparisons, logic, Where ----------------------------------------------------

TEST(CudaElementwise, ComparisonsBroadcasting) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(31);
  for (const auto& [sa, sb] : AllBroadcastCases()) {
    std::vector<std::pair<Tensor, Tensor>> pairs = {
        {Halves(RandomOf(DType::kFloat32, sa, rng, -2, 2)),
         Halves(RandomOf(DType::kFloat32, sb, rng, -2, 2))},
        {RandomOf(DType::kInt32, sa, rng, -3, 3), RandomOf(DType::kInt32, sb, rng, -3, 3)},
        {RandomOf(DType::kInt64, sa, rng, -3, 3), RandomOf(DType::kInt64, sb, rng, -3, 3)}};
    for (const auto& [a, b] : pairs) {
      for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}) {
        Check(MakeNode(op, 2, 1), {a, b}, 0.f, 0.f);
        Check(MakeNode(op, 2, 1), {b, a}, 0.f, 0.f);
      }
    }
    Tensor p = RandomOf(DType::kBool, sa, rng), q = RandomOf(DType::kBool, sb, rng);
    for (const char* op : {"Equal", "And", "Or", "Xor"}) {
      Check(MakeNode(op, 2, 1), {p, q}, 0.f, 0.f);
      Check(MakeNode(op, 2, 1), {q, p}, 0.f, 0.f);
    }
    Check(MakeNode("Not", 1, 1), {p}, 0.f, 0.f);
  }
}

TEST(CudaElementwise, WhereBroadcastingAllWordSizes) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(32);
  const std::vector<std::vector<Shape>> cases = {
      {{5, 7}, {5, 7}, {5, 7}},
      {{2, 1, 4}, {3, 1}, {4}},
      {{}, {5, 7}, {1}},
      {{7}, {}, {3, 7}},
      {{2, 1, 3, 1, 5}, {3, 4, 1}, {2, 1, 1, 1, 5}},
      {{3, 1000}, {1000}, {3, 1}},
  };
  for (const auto& s : cases) {
    Tensor c = RandomOf(DType::kBool, s[0], rng);
    for (DType dt : {DType::kFloat32, DType::kInt32, DType::kInt64, DType::kUInt8, DType::kInt16,
                     DType::kBool, DType::kFloat64}) {
      const double lo = dt == DType::kUInt8 ? 0 : -100;  // in range of every dtype
      Tensor x = RandomOf(dt, s[1], rng, lo, 100), y = RandomOf(dt, s[2], rng, lo, 100);
      Check(MakeNode("Where", 3, 1), {c, x, y}, 0.f, 0.f);
    }
  }
}

// ---- Cast ---------------------------------------------------------------------------

// Source values of every dtype: halves, values out of the narrow types' ranges
// (which wrap through int32), integers that float32/float64 round.
Tensor CastSource(DType dt) {
  const std::vector<double> floats = {2.5,   -2.5,        300,         -1,         0,
                                      0.7,   -0.7,        127.9,       128,        -129,
                                      255.5, 256,         65535.7,     -32769,     1e9,
                                      -1e9,  2147483520., -2147483648., 16777217.};
  const std::vector<int64_t> ints = {0,      1,         -1,          2,           127,
                                     128,    -128,      -129,        255,         256,
                                     300,    32767,     32768,       -32769,      65535,
                                     70000,  2147483647, -2147483648LL, 5000000000LL,
                                     -5000000000LL, 9007199254740993LL, 16777217};
  const bool is_float = dt == DType::kFloat32 || dt == DType::kFloat64;
  const int64_t n = static_cast<int64_t>(is_float ? floats.size() : ints.size());
  Tensor t(dt, {n});
  for (int64_t i = 0; i < n; ++i) {
    switch (dt) {
      case DType::kFloat32: t.As<float>()[i] = static_cast<float>(floats[i]); break;
      case DType::kFloat64: t.As<double>()[i] = floats[i]; break;
      case DType::kInt8: t.As<int8_t>()[i] = static_cast<int8_t>(ints[i]); break;
      case DType::kUInt8: t.As<uint8_t>()[i] = static_cast<uint8_t>(ints[i]); break;
      case DType::kInt16: t.As<int16_t>()[i] = static_cast<int16_t>(ints[i]); break;
      case DType::kInt32: t.As<int32_t>()[i] = static_cast<int32_t>(ints[i]); break;
      case DType::kInt64: t.As<int64_t>()[i] = ints[i]; break;
      default: t.As<bool>()[i] = (i % 3) != 0; break;  // kBool
    }
  }
  return t;
}

const std::vector<std::pair<DType, int64_t>>& CastTargets() {  // dtype, ONNX code
  static const std::vector<std::pair<DType, int64_t>> targets = {
      {DType::kFloat32, 1}, {DType::kUInt8, 2}, {DType::kInt8, 3},  {DType::kInt16, 5},
      {DType::kInt32, 6},   {DType::kInt64, 7}, {DType::kBool, 9},  {DType::kFloat64, 11}};
  return targets;
}

TEST(CudaElementwise, CastAndCastLikeEveryPair) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(40);
  for (const auto& source : CastTargets()) {
    Tensor x = CastSource(source.first);
    for (const auto& [to, code] : CastTargets()) {
      Check(MakeNode("Cast", 1, 1, {{"to", IntAttr(code)}}), {x}, 0.f, 0.f);
      Check(MakeNode("CastLike", 2, 1), {x, RandomOf(to, {1}, rng, 0, 2)}, 0.f, 0.f);
    }
  }
}

#if defined(__x86_64__)
// NaN, infinities and values beyond int32/int64: the CUDA kernel reproduces
// what x86 conversions give the CPU kernel (the most negative integer).
TEST(CudaElementwise, CastOutOfRangeFloatsLikeX86) {
  KAIWU_REQUIRE_CUDA();
  const float inf = std::numeric_limits<float>::infinity();
  Tensor f = MakeTensor<float>({8}, {3e9f, -3e9f, std::nanf(""), inf, -inf, 1e19f, -1e20f, 4e9f});
  Tensor d = MakeTensor<double>({6}, {3e9, -3e9, std::nan(""), 1e19, -1e20, 2147483648.0});
  for (int64_t code : {2, 3, 5, 6, 7, 9}) {
    Check(MakeNode("Cast", 1, 1, {{"to", IntAttr(code)}}), {f}, 0.f, 0.f);
    Check(MakeNode("Cast", 1, 1, {{"to", IntAttr(code)}}), {d}, 0.f, 0.f);
  }
}
#endif

// ---- Softmax family -----------------------------------------------------------------

TEST(CudaElementwise, SoftmaxFamilyAxes) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(41);
  Tensor x = RandomTensor({3, 5, 7}, rng, -3.f, 3.f);
  Tensor ties = Halves(RandomTensor({3, 5, 7}, rng, -2.f, 2.f));
  for (int64_t axis : {-1, 0, 1, 2, -2}) {
    const std::map<std::string, Attribute> attrs = {{"axis", IntAttr(axis)}};
    Check(MakeNode("Softmax", 1, 1, attrs), {x}, kMathRtol, kMathAtol);
    Check(MakeNode("LogSoftmax", 1, 1, attrs), {x}, kMathRtol, kMathAtol);
    Check(MakeNode("Hardmax", 1, 1, attrs), {x}, 0.f, 0.f);
    Check(MakeNode("Hardmax", 1, 1, attrs), {ties}, 0.f, 0.f);
  }
  Check(MakeNode("Softmax", 1, 1), {x}, kMathRtol, kMathAtol);  // default axis -1
}

TEST(CudaElementwise, SoftmaxFamilyLegacyFlattensFromAxis) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(42);
  Tensor x = RandomTensor({3, 5, 7}, rng, -3.f, 3.f);
  Tensor ties = Halves(RandomTensor({3, 5, 7}, rng, -2.f, 2.f));
  for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"}) {
    const float rtol = std::string(op) == "Hardmax" ? 0.f : kMathRtol;
    const float atol = std::string(op) == "Hardmax" ? 0.f : kMathAtol;
    for (int64_t axis : {0, 1, 2, -1}) {
      Node node = MakeNode(op, 1, 1, {{"axis", IntAttr(axis)}});
      node.opset = 11;
      Check(node, {x}, rtol, atol);
      Check(node, {ties}, rtol, atol);
    }
    Node default_axis = MakeNode(op, 1, 1);
    default_axis.opset = 11;
    Check(default_axis, {x}, rtol, atol);
  }
}

TEST(CudaElementwise, SoftmaxFamilyLongManyAndStridedRows) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(43);
  // [2, 3000]: a block per row; [600, 37], [129, 32], [70, 100], [5, 1]: short rows
  // (8, 16 or 32 lanes a row, row counts that leave a warp part-empty); [300, 200]: a
  // warp a row; [2, 300, 3] axis 1: columns.
  const std::vector<std::pair<Shape, int64_t>> cases = {
      {{2, 3000}, -1}, {{600, 37}, -1}, {{129, 32}, -1}, {{70, 100}, -1}, {{5, 1}, -1},
      {{300, 200}, -1}, {{1, 1}, 0}, {{2, 300, 3}, 1}, {{4, 33, 260}, 1}};
  for (const auto& [shape, axis] : cases) {
    Tensor x = RandomTensor(shape, rng, -5.f, 5.f);
    Tensor ties = Halves(RandomTensor(shape, rng, -2.f, 2.f));
    const std::map<std::string, Attribute> attrs = {{"axis", IntAttr(axis)}};
    Check(MakeNode("Softmax", 1, 1, attrs), {x}, kMathRtol, kMathAtol);
    Check(MakeNode("LogSoftmax", 1, 1, attrs), {x}, kMathRtol, kMathAtol);
    Check(MakeNode("Hardmax", 1, 1, attrs), {x}, 0.f, 0.f);
    Check(MakeNode("Hardmax", 1, 1, attrs), {ties}, 0.f, 0.f);
  }
  // Attention rows with masked (-inf) entries: exact zeros there, the rest normalised.
  Tensor masked = RandomTensor({37, 24}, rng, -4.f, 4.f);
  for (int64_t i = 0; i < masked.size(); i += 3) masked.As<float>()[i] = -INFINITY;
  Check(MakeNode("Softmax", 1, 1), {masked}, kMathRtol, kMathAtol);
}

// ---- FusedElementwise ---------------------------------------------------------------

struct Link {
  const char* op;
  int64_t operand;
  int64_t swapped;
  float p0, p1;
};

Node FusedNode(const std::vector<Link>& chain, int num_inputs) {
  Attribute ops;
  ops.kind = Attribute::Kind::kStrings;
  std::vector<int64_t> operand, swapped;
  std::vector<float> params;
  for (const Link& l : chain) {
    ops.strings.push_back(l.op);
    operand.push_back(l.operand);
    swapped.push_back(l.swapped);
    params.push_back(l.p0);
    params.push_back(l.p1);
  }
  Node n = MakeNode("FusedElementwise", num_inputs, 1,
                    {{"ops", ops},
                     {"operand", IntsAttr(operand)},
                     {"swapped", IntsAttr(swapped)},
                     {"params", FloatsAttr(params)}});
  n.domain = "kaiwu";
  n.opset = 1;
  return n;
}

TEST(CudaElementwise, FusedElementwiseEveryOpAndOperandLayout) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(51);
  Tensor x = RandomTensor({2, 3, 4, 5}, rng, -2.f, 2.f);
  Tensor tail = RandomTensor({5}, rng, -1.f, 1.f);               // trailing block
  Tensor scalar = RandomTensor({}, rng, -1.5f, -0.5f);           // one element
  Tensor channel = RandomTensor({3, 1, 1}, rng, -1.f, 1.f);      // strided broadcast
  Tensor full = RandomTensor({2, 3, 4, 5}, rng, 0.5f, 2.f);      // same shape
  Tensor middle = RandomTensor({1, 4, 1}, rng, 0.5f, 1.5f);      // strided broadcast
  const std::vector<Link> chain = {
      {"Add", 1, 0, 0, 0},        {"Mul", 2, 0, 0, 0},  {"LeakyRelu", 0, 0, 0.1f, 0},
      {"Sub", 3, 1, 0, 0},        {"Tanh", 0, 0, 0, 0}, {"Div", 4, 0, 0, 0},
      {"Abs", 0, 0, 0, 0},        {"Sqrt", 0, 0, 0, 0}, {"Neg", 0, 0, 0, 0},
      {"Exp", 0, 0, 0, 0},        {"Mul", 5, 0, 0, 0},  {"Sub", 2, 0, 0, 0},  // > 0.5
      {"Div", 4, 1, 0, 0},        {"Sigmoid", 0, 0, 0, 0},
      {"Clip", 0, 0, 0.2f, 0.8f}, {"Relu", 0, 0, 0, 0}};
  Check(FusedNode(chain, 6), {x, tail, scalar, channel, full, middle}, kMathRtol, kMathAtol);
}

TEST(CudaElementwise, FusedElementwiseBroadcastInputAndLongChain) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(52);
  // The chain's input broadcasts up to an operand's shape.
  Tensor x = RandomTensor({4, 1}, rng, -2.f, 2.f);
  Tensor big = RandomTensor({2, 3, 4, 5}, rng, -1.f, 1.f);
  Check(FusedNode({{"Add", 1, 0, 0, 0}, {"Relu", 0, 0, 0, 0}}, 2), {x, big}, kMathRtol,
        kMathAtol);
  Check(FusedNode({{"Sub", 1, 1, 0, 0}, {"Sigmoid", 0, 0, 0, 0}}, 2), {x, big}, kMathRtol,
        kMathAtol);

  // 37 ops: three launches, the later ones in place on the output.
  Tensor y = RandomTensor({3, 7, 11}, rng, -2.f, 2.f);
  Tensor scale = RandomTensor({11}, rng, 0.9f, 1.1f);
  Tensor shift = RandomTensor({}, rng, -0.2f, 0.2f);
  Tensor per_row = RandomTensor({7, 1}, rng, -0.5f, 0.5f);
  std::vector<Link> chain;
  for (int k = 0; k < 12; ++k) {
    chain.push_back({"Mul", 1, 0, 0, 0});
    chain.push_back({"Add", 2, 0, 0, 0});
    chain.push_back({"Tanh", 0, 0, 0, 0});
  }
  chain.push_back({"Sub", 3, 1, 0, 0});
  Check(FusedNode(chain, 4), {y, scale, shift, per_row}, kMathRtol, kMathAtol);
}

// ---- what the CUDA backend does not run -------------------------------------------------

TEST(CudaElementwise, UnsupportedVariantsThrowAtPrepare) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(61);
  Tensor d = RandomOf(DType::kFloat64, {3, 4}, rng);
  ExpectUnsupported(MakeNode("Add", 2, 1), {d, d});
  ExpectUnsupported(MakeNode("Exp", 1, 1), {d});
  ExpectUnsupported(MakeNode("Softmax", 1, 1), {d});
  Tensor i8 = RandomOf(DType::kInt8, {3, 4}, rng, -5, 5);
  ExpectUnsupported(MakeNode("Neg", 1, 1), {i8});
  ExpectUnsupported(MakeNode("Less", 2, 1), {i8, i8});
  Tensor i32 = RandomOf(DType::kInt32, {3, 4}, rng, -5, 5);
  ExpectUnsupported(MakeNode("Pow", 2, 1), {i32, RandomOf(DType::kFloat32, {4}, rng)});
  // More than 8 distinct broadcast dimensions after merging.
  Tensor a = RandomTensor({2, 1, 2, 1, 2, 1, 2, 1, 2, 1}, rng);
  Tensor b = RandomTensor({1, 2, 1, 2, 1, 2, 1, 2, 1, 2}, rng);
  ExpectUnsupported(MakeNode("Add", 2, 1), {a, b});
}

}  // namespace
}  // namespace testing
}  // namespace kaiwu
