// CUDA float16 / bfloat16 elementwise kernels against the CPU float32 kernels
// on the same rounded inputs (half_harness.h states the tolerances: float16
// 1e-3 relative, bfloat16 8e-3, atol 1e-6; exact for bool outputs, selections
// and Cast): unary math and activations, Clip, IsNaN/IsInf, broadcasting
// arithmetic, Pow, PRelu, comparisons, Where, Cast to and from every dtype,
// FusedElementwise.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdangling-else"
#include "../elementwise_test_util.h"
#pragma GCC diagnostic pop
#include "half_harness.h"

namespace kaiwu {
namespace testing {
namespace {

const DType kHalves[] = {DType::kFloat16, DType::kBFloat16};

// numpy's broadcast of two shapes (which broadcast).
Shape Broadcast(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    out[out.size() - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

struct UnaryCase {
  std::string op;
  std::map<std::string, Attribute> attrs;
  float lo, hi;
};

TEST(CudaHalf, UnaryOps) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(101);
  const std::vector<UnaryCase> cases = {
      {"Relu", {}, -3, 3},          {"LeakyRelu", {{"alpha", FloatAttr(0.1f)}}, -3, 3},
      {"Elu", {}, -3, 3},           {"Selu", {}, -3, 3},
      {"Celu", {}, -3, 3},          {"Sigmoid", {}, -6, 6},
      {"Tanh", {}, -3, 3},          {"Gelu", {}, -3, 3},
      {"Gelu", {{"approximate", StrAttr("tanh")}}, -3, 3},
      {"HardSwish", {}, -4, 4},     {"HardSigmoid", {{"alpha", FloatAttr(0.3f)}}, -4, 4},
      {"Softplus", {}, -5, 5},      {"Softsign", {}, -5, 5},
      {"Mish", {}, -3, 3},          {"Exp", {}, -4, 4},
      {"Log", {}, 0.01f, 50},       {"Sqrt", {}, 0, 100},
      {"Neg", {}, -3, 3},           {"Abs", {}, -3, 3},
      {"Sign", {}, -3, 3},          {"Reciprocal", {}, 0.1f, 10},
      {"Floor", {}, -9, 9},         {"Ceil", {}, -9, 9},
      {"Round", {}, -9, 9},         {"Sin", {}, -3, 3},
      {"Cos", {}, -3, 3},           {"Erf", {}, -2, 2},
      {"ThresholdedRelu", {{"alpha", FloatAttr(0.5f)}}, -2, 2}};
  for (DType dt : kHalves) {
    for (const UnaryCase& c : cases) {
      for (const Shape& shape : {Shape{1}, Shape{7, 13}, Shape{3, 5, 33}, Shape{2, 0}}) {
        Tensor x = RandomTensor(shape, rng, c.lo, c.hi);
        if (c.op == "Round" && x.size() > 4) x.As<float>()[3] = 2.5f;  // a tie, to even
        CheckHalf(MakeNode(c.op, 1, 1, c.attrs), {x}, dt);
      }
    }
    // Reciprocal of a small value overflows float16 to infinity, as the CPU's float would
    // overflow past 65504.
    Tensor tiny = MakeTensor<float>({3}, {1e-5f, -1e-5f, 4.f});
    CheckHalf(MakeNode("Reciprocal", 1, 1), {tiny}, dt);
  }
}

TEST(CudaHalf, ClipAndSpecials) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(102);
  for (DType dt : kHalves) {
    Tensor x = RandomTensor({5, 41}, rng, -3.f, 3.f);
    Tensor lo = MakeTensor<float>({}, {-1.25f}), hi = MakeTensor<float>({}, {0.7f});
    Node clip = MakeNode("Clip", 3, 1);
    CheckHalf(clip, {x, lo, hi}, dt, HalfRtol(dt), 0);           // bounds read on the device
    CheckHalf(clip, {x, lo, hi}, dt, HalfRtol(dt), 0, {1, 2});   // bounds known at Prepare
    CheckHalf(clip, {x, Tensor(), hi}, dt, HalfRtol(dt), 0, {2});  // max only
    CheckHalf(MakeNode("Clip", 1, 1), {x}, dt);                  // no bounds
    Tensor s = MakeTensor<float>({6}, {1.f, NAN, INFINITY, -INFINITY, 0.f, -2.f});
    CheckHalf(MakeNode("IsNaN", 1, 1), {s}, dt);
    CheckHalf(MakeNode("IsInf", 1, 1), {s}, dt);
    CheckHalf(MakeNode("IsInf", 1, 1, {{"detect_positive", IntAttr(0)}}), {s}, dt);
    CheckHalf(MakeNode("Relu", 1, 1), {s}, dt);  // NaN and infinities pass through
  }
}

TEST(CudaHalf, ArithmeticBroadcasts) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(103);
  std::vector<std::pair<Shape, Shape>> cases = BroadcastCases();
  cases.push_back({{3, 1, 7}, {5, 1}});
  cases.push_back({{2, 3, 1, 4, 5}, {3, 2, 1, 5}});
  // Packs of 8 halves over broadcasts: attention scores + mask, a repeated column,
  // both inputs broadcast, a trailing block.
  cases.push_back({{6, 5, 16}, {6, 1, 16}});
  cases.push_back({{4, 3, 8}, {4, 3, 1}});
  cases.push_back({{2, 1, 24}, {1, 3, 24}});
  cases.push_back({{5, 16}, {16}});
  for (DType dt : kHalves) {
    for (const auto& [sa, sb] : cases) {
      Tensor a = RandomTensor(sa, rng, -4.f, 4.f), b = RandomTensor(sb, rng, 0.5f, 2.f);
      for (int64_t i = 0; i < b.size(); i += 2) b.As<float>()[i] *= -1.f;  // |b| >= 0.5
      for (const char* op : {"Add", "Sub", "Mul", "Div", "Min", "Max"})
        CheckHalf(MakeNode(op, 2, 1), {a, b}, dt);
      CheckHalf(MakeNode("Mod", 2, 1, {{"fmod", IntAttr(1)}}), {a, b}, dt);
      // PRelu's slope broadcasts to X without growing it.
      if (NumElements(sb) <= NumElements(sa) && sb.size() <= sa.size()) {
        bool fits = true;
        for (size_t d = 0; d < sb.size(); ++d)
          fits = fits && (sb[d] == 1 || sb[d] == sa[sa.size() - sb.size() + d]);
        if (fits) CheckHalf(MakeNode("PRelu", 2, 1), {a, b}, dt);
      }
    }
    // Variadic folds round after each pairwise step: two roundings of slack.
    Tensor x = RandomTensor({4, 9}, rng, -2.f, 2.f), y = RandomTensor({9}, rng, -2.f, 2.f);
    Tensor z = RandomTensor({4, 1}, rng, -2.f, 2.f);
    for (const char* op : {"Sum", "Mean", "Min", "Max"})
      CheckHalf(MakeNode(op, 3, 1), {x, y, z}, dt, 2 * HalfRtol(dt), 2e-3f);
    CheckHalf(MakeNode("Sum", 1, 1), {x}, dt);
    // Overflow of the float16 range gives infinity.
    Tensor big = MakeTensor<float>({2}, {60000.f, -60000.f});
    CheckHalf(MakeNode("Add", 2, 1), {big, big}, dt);
  }
}

TEST(CudaHalf, PowExponentDtypes) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(104);
  for (DType dt : kHalves) {
    Tensor base = RandomTensor({6, 11}, rng, 0.1f, 3.f);
    Tensor e = RandomTensor({11}, rng, -2.f, 2.f);
    CheckHalf(MakeNode("Pow", 2, 1), {base, e}, dt);  // exponent of the base's dtype
    for (float s : {2.f, 3.f, 0.5f, 1.f, 1.7f}) {
      Tensor se = MakeTensor<float>({}, {s});
      CheckHalf(MakeNode("Pow", 2, 1), {base, se}, dt);
      // A float32 exponent beside a 16-bit base: narrow only the base.
      const std::vector<Tensor> got = RunNodeCuda(MakeNode("Pow", 2, 1), {Narrow(base, dt), se});
      const std::vector<Tensor> want = RunNode(MakeNode("Pow", 2, 1), {Rounded(base, dt), se});
      ExpectTensorsClose(Widen(got[0]), want[0], HalfRtol(dt), 1e-6f, "Pow float32 exponent");
    }
    Tensor ie = MakeTensor<int64_t>({11}, {0, 1, 2, 3, -1, -2, 4, 1, 0, 2, 3});
    const std::vector<Tensor> got = RunNodeCuda(MakeNode("Pow", 2, 1), {Narrow(base, dt), ie});
    const std::vector<Tensor> want = RunNode(MakeNode("Pow", 2, 1), {Rounded(base, dt), ie});
    ExpectTensorsClose(Widen(got[0]), want[0], HalfRtol(dt), 1e-6f, "Pow int64 exponent");
  }
}

TEST(CudaHalf, ComparisonsAndWhere) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(105);
  for (DType dt : kHalves) {
    for (const auto& [sa, sb] : BroadcastCases()) {
      // Values on a grid of 0.5, so that ties are common.
      Tensor a = RandomTensor(sa, rng, -3.f, 3.f), b = RandomTensor(sb, rng, -3.f, 3.f);
      for (Tensor* t : {&a, &b})
        for (int64_t i = 0; i < t->size(); ++i)
          t->As<float>()[i] = std::round(t->As<float>()[i] * 2) / 2;
      for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"})
        CheckHalf(MakeNode(op, 2, 1), {a, b}, dt, 0, 0);
      Tensor c = RandomOf(DType::kBool, Broadcast(sa, sb), rng);
      CheckHalf(MakeNode("Where", 3, 1), {c, a, b}, dt, 0, 0);
    }
  }
}

// Cast between each 16-bit float and every dtype: the CUDA kernel bit for bit
// the CPU's (tested against core/half.h and a float64 rounding reference in
// elementwise_cast_half_test.cc), NaN only as NaN.
TEST(CudaHalf, CastEveryPair) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(106);
  const std::vector<std::pair<DType, int>> types = {
      {DType::kFloat32, 1}, {DType::kUInt8, 2}, {DType::kInt8, 3},    {DType::kInt16, 5},
      {DType::kInt32, 6},   {DType::kInt64, 7}, {DType::kBool, 9},    {DType::kFloat64, 11},
      {DType::kFloat16, 10}, {DType::kBFloat16, 16}};
  auto same = [](const Tensor& g, const Tensor& w, const std::string& what) {
    ASSERT_EQ(g.dtype(), w.dtype()) << what;
    ASSERT_EQ(g.bytes(), w.bytes()) << what;
    const size_t es = DTypeSize(w.dtype());
    for (int64_t i = 0; i < w.size(); ++i) {
      const char* gp = static_cast<const char*>(g.data()) + i * es;
      const char* wp = static_cast<const char*>(w.data()) + i * es;
      if (std::memcmp(gp, wp, es) == 0) continue;
      // Both NaN (the payload of a quiet NaN may differ).
      Tensor one_g(g.dtype(), {1}), one_w(w.dtype(), {1});
      std::memcpy(one_g.data(), gp, es);
      std::memcpy(one_w.data(), wp, es);
      const bool half = w.dtype() == DType::kFloat16 || w.dtype() == DType::kBFloat16;
      const double gv = half ? Widen(one_g).As<float>()[0] : At(one_g, 0);
      const double wv = half ? Widen(one_w).As<float>()[0] : At(one_w, 0);
      ASSERT_TRUE(std::isnan(gv) && std::isnan(wv)) << what << " at " << i << ": " << gv
                                                    << " vs " << wv;
    }
  };
  for (auto [from, from_code] : types) {
    (void)from_code;
    Tensor x;
    if (from == DType::kFloat32 || from == DType::kFloat16 || from == DType::kBFloat16) {
      Tensor f = RandomTensor({4099}, rng, -70000.f, 70000.f);
      const std::vector<float> special = {0.f,       -0.f,     NAN,      INFINITY,    -INFINITY,
                                          65519.f,   65520.f,  1e-7f,    -3e-8f,      2.5f,
                                          -2.5f,     300.7f,   -1.5f,    1e30f,       1e-40f};
      for (size_t i = 0; i < special.size(); ++i) f.As<float>()[i] = special[i];
      for (int64_t i = special.size(); i < f.size(); i += 3) f.As<float>()[i] *= 1e-6f;
      x = from == DType::kFloat32 ? f : Narrow(f, from);
    } else if (from == DType::kFloat64) {
      x = RandomOf(from, {4099}, rng, -70000, 70000);
      x.As<double>()[0] = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);  // one rounding
      x.As<double>()[1] = std::numeric_limits<double>::quiet_NaN();
    } else {
      x = RandomOf(from, {4099}, rng, from == DType::kUInt8 ? 0 : -100000,
                   from == DType::kUInt8 ? 256 : 100000);
    }
    for (auto [to, to_code] : types) {
      const bool involves_half = from == DType::kFloat16 || from == DType::kBFloat16 ||
                                 to == DType::kFloat16 || to == DType::kBFloat16;
      if (!involves_half) continue;
      Node node = MakeNode("Cast", 1, 1, {{"to", IntAttr(to_code)}});
      const std::string what = std::string("Cast ") + DTypeName(from) + " -> " + DTypeName(to);
      same(RunNodeCuda(node, {x})[0], RunNode(node, {x})[0], what);
    }
  }
}

TEST(CudaHalf, FusedElementwiseChain) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(107);
  Attribute ops;
  ops.kind = Attribute::Kind::kStrings;
  ops.strings = {"Add", "Mul", "LeakyRelu", "Sub", "Tanh", "Div", "Abs", "Sqrt", "Neg", "Exp",
                 "Sigmoid", "Clip", "Relu"};
  const std::vector<int64_t> operand = {1, 2, 0, 3, 0, 4, 0, 0, 0, 0, 0, 0, 0};
  const std::vector<int64_t> swapped = {0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  std::vector<float> params(2 * operand.size(), 0.f);
  params[2 * 2] = 0.1f;                                   // LeakyRelu alpha
  params[2 * 11] = 0.2f, params[2 * 11 + 1] = 0.8f;       // Clip bounds
  Node node = MakeNode("FusedElementwise", 5, 1,
                       {{"ops", ops},
                        {"operand", IntsAttr(operand)},
                        {"swapped", IntsAttr(swapped)},
                        {"params", FloatsAttr(params)}});
  node.domain = "kaiwu";
  node.opset = 1;
  for (DType dt : kHalves) {
    Tensor x = RandomTensor({2, 3, 4, 5}, rng, -2.f, 2.f);
    Tensor tail = RandomTensor({5}, rng, -1.f, 1.f);
    Tensor scalar = RandomTensor({}, rng, -1.5f, -0.5f);
    Tensor channel = RandomTensor({3, 1, 1}, rng, -1.f, 1.f);
    Tensor full = RandomTensor({2, 3, 4, 5}, rng, 0.5f, 2.f);
    CheckHalf(node, {x, tail, scalar, channel, full}, dt);
  }
  // Mixed dtypes are a model error.
  ExpectModelError(node,
                   {Info(DType::kFloat16, {4}), Info(DType::kFloat32, {4}),
                    Info(DType::kFloat16, {4}), Info(DType::kFloat16, {4}),
                    Info(DType::kFloat16, {4})},
                   "input 1 has dtype float32, expected one of: float16");
}

}  // namespace
}  // namespace testing
}  // namespace kaiwu
