// Unary math and activation kernels against float64 references.
#include <cmath>
#include <functional>
#include <limits>

#include "elementwise_test_util.h"

namespace kaiwu {
namespace testing {
namespace {

using Ref1 = std::function<double(double)>;

void CheckUnary(const Node& node, const Tensor& x, const Ref1& ref, double tol) {
  {
    Tensor y = RunBoth(node, {x});
    ASSERT_EQ(y.shape(), x.shape());
    ASSERT_EQ(y.dtype(), x.dtype());
    for (int64_t i = 0; i < y.size(); ++i)
      ASSERT_TRUE(Near(At(y, i), ref(At(x, i)), tol))
          << node.op_type << " " << DTypeName(x.dtype()) << " x=" << At(x, i) << ": got " << At(y, i) << ", want " << ref(At(x, i));
  }
}

double Sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double Softplus(double x) { return std::log1p(std::exp(x)); }

struct UnaryCase {
  std::string op;
  Ref1 ref;
  double lo, hi;
};

TEST(ElementwiseUnary, FloatOpsMatchReference) {
  std::mt19937 rng(11);
  const std::vector<UnaryCase> cases = {
      {"Neg", [](double x) { return -x; }, -3, 3},
      {"Abs", [](double x) { return std::abs(x); }, -3, 3},
      {"Sign", [](double x) { return double((x > 0) - (x < 0)); }, -3, 3},
      {"Sqrt", [](double x) { return std::sqrt(x); }, 0, 10},
      {"Exp", [](double x) { return std::exp(x); }, -10, 10},
      {"Log", [](double x) { return std::log(x); }, 0.01, 100},
      {"Reciprocal", [](double x) { return 1 / x; }, 0.1, 10},
      {"Floor", [](double x) { return std::floor(x); }, -5, 5},
      {"Ceil", [](double x) { return std::ceil(x); }, -5, 5},
      {"Round", [](double x) { return std::nearbyint(x); }, -5, 5},
      {"Sin", [](double x) { return std::sin(x); }, -6, 6},
      {"Cos", [](double x) { return std::cos(x); }, -6, 6},
      {"Erf", [](double x) { return std::erf(x); }, -4, 4},
      {"Sigmoid", Sigmoid, -20, 20},
      {"Tanh", [](double x) { return std::tanh(x); }, -8, 8},
      {"Softplus", Softplus, -30, 30},
      {"Softsign", [](double x) { return x / (1 + std::abs(x)); }, -5, 5},
  };
  for (const UnaryCase& c : cases) {
    for (DType dt : {DType::kFloat32, DType::kFloat64}) {
      const double tol = dt == DType::kFloat32 ? 4e-6 : 1e-12;
      for (Shape shape : {Shape{}, Shape{7}, Shape{3, 33}, Shape{140, 1000}}) {
        Tensor x = RandomOf(dt, shape, rng, c.lo, c.hi);
        // Float32 inputs are exact in double, so the reference sees the same x.
        CheckUnary(MakeNode(c.op, 1, 1), x, c.ref, tol);
      }
    }
  }
  // Round takes halves to even.
  Tensor halves = MakeTensor<float>({4}, {0.5f, 1.5f, 2.5f, -0.5f});
  Tensor r = RunNode(MakeNode("Round", 1, 1), {halves})[0];
  EXPECT_EQ(std::vector<float>(r.As<float>(), r.As<float>() + 4),
            (std::vector<float>{0.f, 2.f, 2.f, -0.f}));
}

TEST(ElementwiseUnary, IntegerNegAbsSignRelu) {
  std::mt19937 rng(12);
  for (DType dt : {DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64}) {
    Tensor x = RandomOf(dt, {5, 9}, rng, -100, 100);
    CheckUnary(MakeNode("Neg", 1, 1), x, [](double v) { return -v; }, 0);
    CheckUnary(MakeNode("Abs", 1, 1), x, [](double v) { return std::abs(v); }, 0);
    CheckUnary(MakeNode("Sign", 1, 1), x, [](double v) { return double((v > 0) - (v < 0)); }, 0);
    CheckUnary(MakeNode("Relu", 1, 1), x, [](double v) { return std::max(v, 0.0); }, 0);
  }
  Tensor u = RandomOf(DType::kUInt8, {10}, rng, 0, 255);
  CheckUnary(MakeNode("Abs", 1, 1), u, [](double v) { return v; }, 0);
}

TEST(ElementwiseUnary, ActivationsWithRandomAttributes) {
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> pick(0.1f, 2.f);
  for (int trial = 0; trial < 3; ++trial) {
    const double a = pick(rng), b = pick(rng) - 1, g = pick(rng);
    const auto fa = FloatAttr(static_cast<float>(a)), fb = FloatAttr(static_cast<float>(b));
    const double af = static_cast<float>(a), bf = static_cast<float>(b);
    const double gf = static_cast<float>(g);
    auto elu = [af](double x) { return x < 0 ? af * (std::exp(x) - 1) : x; };
    struct Case { Node node; Ref1 ref; };
    std::vector<Case> cases = {
        {MakeNode("Relu", 1, 1), [](double x) { return std::max(x, 0.0); }},
        {MakeNode("LeakyRelu", 1, 1, {{"alpha", fa}}), [af](double x) { return x < 0 ? af * x : x; }},
        {MakeNode("Elu", 1, 1, {{"alpha", fa}}), elu},
        {MakeNode("Selu", 1, 1, {{"alpha", fa}, {"gamma", FloatAttr(float(g))}}),
         [af, gf](double x) { return gf * (x <= 0 ? af * (std::exp(x) - 1) : x); }},
        {MakeNode("Celu", 1, 1, {{"alpha", fa}}),
         [af](double x) { return std::max(0.0, x) + std::min(0.0, af * (std::exp(x / af) - 1)); }},
        {MakeNode("HardSigmoid", 1, 1, {{"alpha", fa}, {"beta", fb}}),
         [af, bf](double x) { return std::clamp(af * x + bf, 0.0, 1.0); }},
        {MakeNode("HardSwish", 1, 1), [](double x) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); }},
        {MakeNode("Gelu", 1, 1), [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }},
        {MakeNode("Gelu", 1, 1, {{"approximate", StrAttr("tanh")}}), [](double x) {
           return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
         }},
        {MakeNode("ThresholdedRelu", 1, 1, {{"alpha", fa}}), [af](double x) { return x > af ? x : 0; }},
        {MakeNode("Mish", 1, 1), [](double x) { return x * std::tanh(Softplus(x)); }},
    };
    for (const Case& c : cases) {
      for (DType dt : {DType::kFloat32, DType::kFloat64}) {
        Tensor x = RandomOf(dt, trial == 0 ? Shape{140, 1000} : Shape{3, 17}, rng, -6, 6);
        CheckUnary(c.node, x, c.ref, dt == DType::kFloat32 ? 4e-6 : 1e-12);
      }
    }
  }
  // Defaults: LeakyRelu alpha 0.01, Selu's constants.
  Tensor x = MakeTensor<float>({2}, {-1.f, 2.f});
  Tensor y = RunNode(MakeNode("LeakyRelu", 1, 1), {x})[0];
  EXPECT_FLOAT_EQ(y.As<float>()[0], -0.01f);
  y = RunNode(MakeNode("Selu", 1, 1), {x})[0];
  EXPECT_NEAR(y.As<float>()[0], 1.0507010 * 1.6732632 * (std::exp(-1.0) - 1), 1e-6);
  EXPECT_NEAR(y.As<float>()[1], 1.0507010 * 2, 1e-6);
}

TEST(ElementwiseUnary, ClipOptionalBounds) {
  std::mt19937 rng(14);
  const Tensor none;
  for (DType dt : {DType::kFloat32, DType::kInt32, DType::kInt64, DType::kUInt8}) {
    const bool sgn = dt != DType::kUInt8;
    Tensor x = RandomOf(dt, {140, 1000}, rng, sgn ? -50 : 0, 50);
    Tensor lo = RandomOf(dt, {}, rng, sgn ? -20 : 5, sgn ? -5 : 10);
    Tensor hi = RandomOf(dt, {1}, rng, 15, 30);
    const double l = At(lo, 0), h = At(hi, 0);
    const double inf = std::numeric_limits<double>::infinity();
    struct Case { std::vector<Tensor> ins; double l, h; };
    std::vector<Case> cases = {{{x}, -inf, inf},          {{x, lo}, l, inf},
                               {{x, lo, hi}, l, h},       {{x, none, hi}, -inf, h},
                               {{x, hi, lo}, h, l}};  // min > max: all max
    for (const Case& c : cases) {
      Node node = MakeNode("Clip", static_cast<int>(c.ins.size()), 1);
      for (size_t i = 0; i < c.ins.size(); ++i)
        if (c.ins[i].dtype() == DType::kUndefined) node.inputs[i] = -1;
      {
        Tensor y = RunBoth(node, c.ins);
        for (int64_t i = 0; i < y.size(); ++i)
          ASSERT_EQ(At(y, i), std::min(std::max(At(x, i), c.l), c.h));
      }
    }
  }
  // Opset 6 form: bounds as attributes.
  Node old = MakeNode("Clip", 1, 1, {{"min", FloatAttr(-0.5f)}, {"max", FloatAttr(0.25f)}});
  old.opset = 6;
  Tensor x = RandomOf(DType::kFloat32, {50}, rng, -1, 1);
  CheckUnary(old, x, [](double v) { return std::clamp(v, -0.5, 0.25); }, 0);
}

TEST(ElementwiseUnary, IsNaNIsInf) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = MakeTensor<float>({5}, {1.f, NAN, inf, -inf, 0.f});
  auto run = [&](const Node& n) {
    Tensor y = RunNode(n, {x})[0];
    EXPECT_EQ(y.dtype(), DType::kBool);
    return std::vector<bool>(y.As<bool>(), y.As<bool>() + 5);
  };
  EXPECT_EQ(run(MakeNode("IsNaN", 1, 1)), (std::vector<bool>{0, 1, 0, 0, 0}));
  EXPECT_EQ(run(MakeNode("IsInf", 1, 1)), (std::vector<bool>{0, 0, 1, 1, 0}));
  EXPECT_EQ(run(MakeNode("IsInf", 1, 1, {{"detect_negative", IntAttr(0)}})),
            (std::vector<bool>{0, 0, 1, 0, 0}));
  EXPECT_EQ(run(MakeNode("IsInf", 1, 1, {{"detect_positive", IntAttr(0)}})),
            (std::vector<bool>{0, 0, 0, 1, 0}));
}

TEST(ElementwiseUnary, BadInputsThrow) {
  std::mt19937 rng(15);
  Tensor i = RandomOf(DType::kInt32, {3}, rng);
  Tensor f = RandomOf(DType::kFloat32, {3}, rng);
  EXPECT_THROW(RunNode(MakeNode("Sqrt", 1, 1), {i}), Error);
  EXPECT_THROW(RunNode(MakeNode("Neg", 1, 1), {RandomOf(DType::kUInt8, {3}, rng, 0, 9)}), Error);
  EXPECT_THROW(RunNode(MakeNode("Gelu", 1, 1, {{"approximate", StrAttr("fast")}}), {f}), Error);
  EXPECT_THROW(RunNode(MakeNode("Elu", 1, 1), {i}), Error);
  EXPECT_THROW(RunNode(MakeNode("Exp", 2, 1), {f, f}), Error);
  EXPECT_THROW(RunNode(MakeNode("Clip", 2, 1), {f, RandomOf(DType::kFloat32, {2}, rng)}), Error);
  EXPECT_THROW(RunNode(MakeNode("Clip", 2, 1), {f, RandomOf(DType::kInt32, {}, rng)}), Error);
  EXPECT_THROW(RunNode(MakeNode("IsNaN", 1, 1), {i}), Error);
  EXPECT_THROW(RunNode(MakeNode("Celu", 1, 1, {{"alpha", FloatAttr(0.f)}}), {f}), Error);
}

}  // namespace
}  // namespace testing
}  // namespace kaiwu
