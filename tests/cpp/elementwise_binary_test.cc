// Broadcasting arithmetic kernels against float64 references.
#include <cmath>
#include <functional>

#include "elementwise_test_util.h"

namespace kaiwu {
namespace testing {
namespace {

using Ref = std::function<double(double, double)>;

// Runs op on (a, b) at 1 and 3 threads and checks every element against ref
// applied through the naive broadcast index.
void CheckBinary(const std::string& op, const Tensor& a, const Tensor& b, const Ref& ref,
                 double tol, std::map<std::string, Attribute> attrs = {}) {
  Node node = MakeNode(op, 2, 1, attrs);
  {
    Tensor out = RunBoth(node, {a, b});
    for (int64_t i = 0; i < out.size(); ++i) {
      double want = ref(At(a, BroadcastIndex(out.shape(), a.shape(), i)),
                        At(b, BroadcastIndex(out.shape(), b.shape(), i)));
      ASSERT_TRUE(Near(At(out, i), want, tol))
          << op << " " << ShapeToString(a.shape()) << " x " << ShapeToString(b.shape()) << " at "
          << i << ": got " << At(out, i) << ", want " << want;
    }
  }
}

const std::vector<std::pair<std::string, Ref>>& FloatOps() {
  static const std::vector<std::pair<std::string, Ref>> ops = {
      {"Add", [](double x, double y) { return x + y; }},
      {"Sub", [](double x, double y) { return x - y; }},
      {"Mul", [](double x, double y) { return x * y; }},
      {"Div", [](double x, double y) { return x / y; }},
      {"Min", [](double x, double y) { return std::min(x, y); }},
      {"Max", [](double x, double y) { return std::max(x, y); }},
  };
  return ops;
}

TEST(ElementwiseBinary, FloatBroadcastCases) {
  std::mt19937 rng(1);
  for (auto [sa, sb] : BroadcastCases()) {
    for (const auto& [op, ref] : FloatOps()) {
      Tensor a = RandomOf(DType::kFloat32, sa, rng, 0.5, 2);
      Tensor b = RandomOf(DType::kFloat32, sb, rng, 0.5, 2);
      CheckBinary(op, a, b, ref, 1e-6);
      if (sa != sb) CheckBinary(op, b, a, ref, 1e-6);
    }
  }
}

TEST(ElementwiseBinary, RandomShapesAllDtypes) {
  std::mt19937 rng(2);
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kInt8,
                   DType::kUInt8, DType::kInt16}) {
    for (int trial = 0; trial < 12; ++trial) {
      Shape out;
      std::vector<Shape> s = RandomBroadcastShapes(2, rng, &out);
      if (trial % 2) std::swap(s[0], s[1]);
      const bool sgn = dt != DType::kUInt8;
      Tensor a = RandomOf(dt, s[0], rng, sgn ? -20 : 0, 20);
      Tensor b = RandomOf(dt, s[1], rng, sgn ? -9 : 1, 9, /*nonzero=*/true);
      const double tol = dt == DType::kFloat32 ? 1e-6 : 1e-12;
      if (dt == DType::kUInt8 || dt == DType::kInt8) {  // keep products in range
        a = RandomOf(dt, s[0], rng, sgn ? -10 : 0, 10);
      }
      for (const auto& [op, ref] : FloatOps()) {
        Ref r = ref;
        if (op == "Div" && !IsFloat(dt)) r = [](double x, double y) { return std::trunc(x / y); };
        if (op == "Sub" && dt == DType::kUInt8) continue;  // wraps
        CheckBinary(op, a, b, r, tol);
      }
    }
  }
}

TEST(ElementwiseBinary, IntegerModBothModes) {
  std::mt19937 rng(3);
  for (DType dt : {DType::kInt32, DType::kInt64}) {
    Tensor a = RandomOf(dt, {5, 6}, rng, -50, 50);
    Tensor b = RandomOf(dt, {6}, rng, -7, 7, true);
    CheckBinary("Mod", a, b, [](double x, double y) { return x - y * std::floor(x / y); }, 0);
    CheckBinary("Mod", a, b, [](double x, double y) { return std::fmod(x, y); }, 0,
                {{"fmod", IntAttr(1)}});
  }
  Tensor fa = RandomOf(DType::kFloat32, {3, 4}, rng, -5, 5);
  Tensor fb = RandomOf(DType::kFloat32, {4}, rng, 0.5, 2);
  CheckBinary("Mod", fa, fb, [](double x, double y) { return std::fmod(x, y); }, 1e-5,
              {{"fmod", IntAttr(1)}});
}

TEST(ElementwiseBinary, IntegerDivisionEdgeCases) {
  Tensor a = MakeTensor<int32_t>({4}, {INT32_MIN, 7, -7, 5});
  Tensor b = MakeTensor<int32_t>({4}, {-1, -2, 2, 5});
  Tensor out = RunNode(MakeNode("Div", 2, 1), {a, b})[0];
  EXPECT_EQ(out.As<int32_t>()[0], INT32_MIN);  // wraps, no trap
  EXPECT_EQ(out.As<int32_t>()[1], -3);
  EXPECT_EQ(out.As<int32_t>()[2], -3);
  EXPECT_EQ(out.As<int32_t>()[3], 1);
  // Integer overflow wraps.
  Tensor big = MakeTensor<int32_t>({2}, {INT32_MAX, INT32_MIN});
  Tensor sum = RunNode(MakeNode("Add", 2, 1), {big, MakeTensor<int32_t>({}, {1})})[0];
  EXPECT_EQ(sum.As<int32_t>()[0], INT32_MIN);
  Tensor prod = RunNode(MakeNode("Mul", 2, 1), {big, MakeTensor<int32_t>({}, {2})})[0];
  EXPECT_EQ(prod.As<int32_t>()[0], -2);
  Tensor neg = RunNode(MakeNode("Neg", 1, 1), {big})[0];
  EXPECT_EQ(neg.As<int32_t>()[1], INT32_MIN);
  Tensor zero = MakeTensor<int32_t>({4}, {1, 0, 2, 3});
  try {
    RunNode(MakeNode("Div", 2, 1), {a, zero});
    ADD_FAILURE() << "division by zero did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kRuntime);
  }
}

TEST(ElementwiseBinary, VariadicSumMeanMinMax) {
  std::mt19937 rng(4);
  struct Case { std::string op; std::function<double(const std::vector<double>&)> ref; };
  std::vector<Case> cases = {
      {"Sum", [](const std::vector<double>& v) { double s = 0; for (double x : v) s += x; return s; }},
      {"Mean", [](const std::vector<double>& v) { double s = 0; for (double x : v) s += x; return s / v.size(); }},
      {"Min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }},
      {"Max", [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }},
  };
  for (const Case& c : cases) {
    for (int n : {1, 2, 3, 4}) {
      for (int trial = 0; trial < 4; ++trial) {
        Shape out;
        std::vector<Shape> shapes = RandomBroadcastShapes(n, rng, &out);
        if (trial == 3) {  // big enough to go parallel
          shapes = {{1, 700}, {200, 700}, {200, 1}, {700}};
          shapes.resize(n);
          out = n == 1 ? Shape{1, 700} : Shape{200, 700};
        }
        std::vector<Tensor> ins;
        for (const Shape& s : shapes) ins.push_back(RandomOf(DType::kFloat32, s, rng, -2, 2));
        {
          Tensor y = RunBoth(MakeNode(c.op, n, 1), ins);
          ASSERT_EQ(y.shape(), out) << c.op;
          for (int64_t i = 0; i < y.size(); ++i) {
            std::vector<double> v;
            for (const Tensor& t : ins) v.push_back(At(t, BroadcastIndex(out, t.shape(), i)));
            ASSERT_TRUE(Near(At(y, i), c.ref(v), 1e-6)) << c.op << " n=" << n << " at " << i;
          }
        }
      }
    }
  }
}

TEST(ElementwiseBinary, MinMaxPropagateNaN) {
  Tensor a = MakeTensor<float>({3}, {NAN, 1.f, 2.f});
  Tensor b = MakeTensor<float>({3}, {0.f, NAN, 3.f});
  for (const char* op : {"Min", "Max"}) {
    Tensor y = RunNode(MakeNode(op, 2, 1), {a, b})[0];
    EXPECT_TRUE(std::isnan(y.As<float>()[0])) << op;
    EXPECT_TRUE(std::isnan(y.As<float>()[1])) << op;
  }
}

TEST(ElementwiseBinary, PowMixedTypes) {
  std::mt19937 rng(5);
  auto pow_ref = [](double x, double y) { return std::pow(x, y); };
  // float base: general, one-element fast paths and integer exponents.
  for (auto [sa, sb] : BroadcastCases()) {
    Tensor a = RandomOf(DType::kFloat32, sa, rng, 0.1, 2);
    Tensor b = RandomOf(DType::kFloat32, sb, rng, -2, 2);
    CheckBinary("Pow", a, b, pow_ref, 1e-5);
  }
  for (float e : {2.f, 3.f, 0.5f, 1.f, -1.5f}) {
    Tensor a = RandomOf(DType::kFloat32, {400, 400}, rng, 0.1, 2);
    CheckBinary("Pow", a, MakeTensor<float>({}, {e}), pow_ref, 1e-5);
  }
  Tensor af = RandomOf(DType::kFloat64, {4, 5}, rng, -2, 2);
  CheckBinary("Pow", af, RandomOf(DType::kInt64, {5}, rng, -3, 4), pow_ref, 1e-12);
  // integer base: exact integer powers, float exponents truncate.
  Tensor ai = RandomOf(DType::kInt64, {6, 5}, rng, -6, 6);
  CheckBinary("Pow", ai, RandomOf(DType::kInt32, {5}, rng, 0, 6), pow_ref, 0);
  CheckBinary("Pow", RandomOf(DType::kInt32, {7}, rng, 1, 9),
              RandomOf(DType::kFloat32, {7}, rng, 0, 3), [](double x, double y) {
                return std::trunc(std::pow(x, static_cast<float>(y)));
              }, 1e-6);
}

TEST(ElementwiseBinary, PReluSlopeBroadcasts) {
  std::mt19937 rng(6);
  auto ref = [](double x, double s) { return x < 0 ? x * s : x; };
  for (Shape slope : {Shape{16, 1, 1}, Shape{1}, Shape{64}, Shape{3, 16, 64, 64}}) {
    Tensor x = RandomOf(DType::kFloat32, {3, 16, 64, 64}, rng, -2, 2);
    CheckBinary("PRelu", x, RandomOf(DType::kFloat32, slope, rng, 0, 0.5), ref, 1e-6);
  }
  CheckBinary("PRelu", RandomOf(DType::kInt64, {3, 4}, rng, -9, 9),
              RandomOf(DType::kInt64, {4}, rng, 1, 4), ref, 0);
}

TEST(ElementwiseBinary, BadInputsThrow) {
  std::mt19937 rng(7);
  Tensor f34 = RandomOf(DType::kFloat32, {3, 4}, rng);
  Tensor f5 = RandomOf(DType::kFloat32, {5}, rng);
  Tensor i4 = RandomOf(DType::kInt32, {4}, rng, 1, 5);
  EXPECT_THROW(RunNode(MakeNode("Add", 2, 1), {f34, f5}), Error);       // shapes
  EXPECT_THROW(RunNode(MakeNode("Mul", 2, 1), {f34, i4}), Error);       // dtypes
  EXPECT_THROW(RunNode(MakeNode("Sub", 3, 1), {f34, f34, f34}), Error); // arity
  EXPECT_THROW(RunNode(MakeNode("Sum", 2, 1), {i4, i4}), Error);        // Sum on ints
  EXPECT_THROW(RunNode(MakeNode("Mod", 2, 1), {f34, f34}), Error);      // float needs fmod=1
  EXPECT_THROW(RunNode(MakeNode("Mod", 2, 1, {{"fmod", IntAttr(2)}}), {i4, i4}), Error);
  EXPECT_THROW(RunNode(MakeNode("Pow", 2, 1), {RandomOf(DType::kInt8, {2}, rng), f5}), Error);
  EXPECT_THROW(RunNode(MakeNode("PRelu", 2, 1), {f5, RandomOf(DType::kFloat32, {3, 5}, rng)}),
               Error);  // slope must broadcast to X
  EXPECT_THROW(RunNode(MakeNode("Add", 2, 1), {RandomOf(DType::kBool, {2}, rng),
                                              RandomOf(DType::kBool, {2}, rng)}),
               Error);
}

}  // namespace
}  // namespace testing
}  // namespace kaiwu
