// Comparison, logical, Where and Cast kernels against float64 references.
#include <cmath>
#include <functional>

#include "elementwise_test_util.h"

namespace kaiwu {
namespace testing {
namespace {

using Pred = std::function<bool(double, double)>;

// A float tensor with its values rounded down, so that ties are common.
Tensor Floored(const Tensor& t) {
  Tensor r(t.dtype(), t.shape());
  for (int64_t i = 0; i < t.size(); ++i) {
    if (t.dtype() == DType::kFloat32) r.As<float>()[i] = std::floor(t.As<float>()[i]);
    else r.As<double>()[i] = std::floor(t.As<double>()[i]);
  }
  return r;
}

TEST(ElementwiseCompare, AllOpsDtypesAndBroadcasts) {
  std::mt19937 rng(21);
  const std::vector<std::pair<std::string, Pred>> ops = {
      {"Equal", [](double x, double y) { return x == y; }},
      {"Less", [](double x, double y) { return x < y; }},
      {"Greater", [](double x, double y) { return x > y; }},
      {"LessOrEqual", [](double x, double y) { return x <= y; }},
      {"GreaterOrEqual", [](double x, double y) { return x >= y; }},
  };
  auto cases = BroadcastCases();
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kUInt8,
                   DType::kInt8, DType::kInt16}) {
    for (size_t c = 0; c < cases.size(); ++c) {
      if (dt != DType::kFloat32 && c % 3 != 0) continue;  // keep the test quick
      // Small integer ranges make ties (and so Equal) common.
      Tensor a = RandomOf(dt, cases[c].first, rng, 0, 4);
      Tensor b = RandomOf(dt, cases[c].second, rng, 0, 4);
      if (IsFloat(dt)) {
        a = Floored(a);
        b = Floored(b);
      }
      const bool big = a.size() + b.size() > 10000;
      for (const auto& [op, pred] : ops) {
        if (big && op != "Equal" && op != "Less") continue;
        {
          Tensor y = RunBoth(MakeNode(op, 2, 1), {a, b});
          ASSERT_EQ(y.dtype(), DType::kBool);
          for (int64_t i = 0; i < y.size(); ++i) {
            bool want = pred(At(a, BroadcastIndex(y.shape(), a.shape(), i)),
                             At(b, BroadcastIndex(y.shape(), b.shape(), i)));
            ASSERT_EQ(y.As<bool>()[i], want) << op << " " << DTypeName(dt) << " case " << c;
          }
        }
      }
    }
  }
}

TEST(ElementwiseCompare, LogicalOnBool) {
  std::mt19937 rng(22);
  const std::vector<std::pair<std::string, Pred>> ops = {
      {"And", [](double x, double y) { return x && y; }},
      {"Or", [](double x, double y) { return x || y; }},
      {"Xor", [](double x, double y) { return (x != 0) != (y != 0); }},
      {"Equal", [](double x, double y) { return x == y; }},
  };
  for (auto [sa, sb] : BroadcastCases()) {
    Tensor a = RandomOf(DType::kBool, sa, rng);
    Tensor b = RandomOf(DType::kBool, sb, rng);
    for (const auto& [op, pred] : ops) {
      {
        Tensor y = RunBoth(MakeNode(op, 2, 1), {a, b});
        for (int64_t i = 0; i < y.size(); ++i)
          ASSERT_EQ(y.As<bool>()[i], pred(At(a, BroadcastIndex(y.shape(), sa, i)),
                                          At(b, BroadcastIndex(y.shape(), sb, i))))
              << op;
      }
    }
    Tensor n = RunNode(MakeNode("Not", 1, 1), {a})[0];
    for (int64_t i = 0; i < n.size(); ++i) ASSERT_EQ(n.As<bool>()[i], !a.As<bool>()[i]);
  }
}

TEST(ElementwiseWhere, ThreeWayBroadcastAnyDtype) {
  std::mt19937 rng(23);
  for (DType dt : {DType::kFloat32, DType::kInt64, DType::kBool, DType::kInt16, DType::kUInt8}) {
    for (int trial = 0; trial < 16; ++trial) {
      Shape out;
      std::vector<Shape> s = RandomBroadcastShapes(3, rng, &out);
      std::shuffle(s.begin(), s.end(), rng);
      if (trial == 0) {
        s = {{64, 1, 60}, {64, 40, 60}, {}};  // parallel, scalar Y
        out = {64, 40, 60};
      } else if (trial == 1) {
        s = {{150, 1000}, {150, 1000}, {150, 1000}};
        out = {150, 1000};
      }
      Tensor c = RandomOf(DType::kBool, s[0], rng);
      Tensor x = RandomOf(dt, s[1], rng, 0, 100);
      Tensor y = RandomOf(dt, s[2], rng, 0, 100);
      {
        Tensor o = RunBoth(MakeNode("Where", 3, 1), {c, x, y});
        ASSERT_EQ(o.shape(), out);
        ASSERT_EQ(o.dtype(), dt);
        for (int64_t i = 0; i < o.size(); ++i) {
          double want = At(c, BroadcastIndex(out, c.shape(), i))
                            ? At(x, BroadcastIndex(out, x.shape(), i))
                            : At(y, BroadcastIndex(out, y.shape(), i));
          ASSERT_EQ(At(o, i), want) << DTypeName(dt) << " trial " << trial;
        }
      }
    }
  }
}

// Reference conversion through double: truncation, wrap for narrow ints, bool.
double RefConvert(double v, DType to) {
  auto wrap = [](double x, double mod, double lo) {
    double t = std::fmod(std::trunc(x) - lo, mod);
    return (t < 0 ? t + mod : t) + lo;
  };
  switch (to) {
    case DType::kFloat32: return static_cast<float>(v);
    case DType::kFloat64: return v;
    case DType::kBool: return v != 0;
    case DType::kInt8: return wrap(v, 256, -128);
    case DType::kUInt8: return wrap(v, 256, 0);
    case DType::kInt16: return wrap(v, 65536, -32768);
    default: return std::trunc(v);
  }
}

TEST(ElementwiseCast, AllPairsAndCastLike) {
  std::mt19937 rng(24);
  const std::vector<std::pair<DType, int>> types = {
      {DType::kFloat32, 1}, {DType::kUInt8, 2}, {DType::kInt8, 3},  {DType::kInt16, 5},
      {DType::kInt32, 6},   {DType::kInt64, 7}, {DType::kBool, 9},  {DType::kFloat64, 11}};
  for (auto [from, from_code] : types) {
    (void)from_code;
    const bool sgn = from != DType::kUInt8;
    Tensor x = RandomOf(from, {140, 1000}, rng, sgn ? -100 : 0, 100);
    for (int64_t i = 0; i < x.size(); i += 7) {  // exact zeros among fractional values
      if (from == DType::kFloat32) x.As<float>()[i] = 0;
      if (from == DType::kFloat64) x.As<double>()[i] = 0;
    }
    for (auto [to, to_code] : types) {
      for (bool like : {false, true}) {
        Node node = like ? MakeNode("CastLike", 2, 1) : MakeNode("Cast", 1, 1, {{"to", IntAttr(to_code)}});
        std::vector<Tensor> ins = {x};
        if (like) ins.push_back(RandomOf(to, {1}, rng, 0, 2));
        Tensor y = RunBoth(node, ins);
        ASSERT_EQ(y.dtype(), to);
        ASSERT_EQ(y.shape(), x.shape());
        for (int64_t i = 0; i < y.size(); ++i)
          ASSERT_EQ(At(y, i), RefConvert(At(x, i), to))
              << DTypeName(from) << " -> " << DTypeName(to) << " x=" << At(x, i);
      }
    }
  }
  // float -> int wraps for the narrow types like numpy: 300.7 -> uint8 44, -1.5 -> 255.
  Tensor f = MakeTensor<float>({3}, {300.7f, -1.5f, -2.9f});
  Tensor u = RunNode(MakeNode("Cast", 1, 1, {{"to", IntAttr(2)}}), {f})[0];
  EXPECT_EQ(u.As<uint8_t>()[0], 44);
  EXPECT_EQ(u.As<uint8_t>()[1], 255);
  Tensor i = RunNode(MakeNode("Cast", 1, 1, {{"to", IntAttr(6)}}), {f})[0];
  EXPECT_EQ(i.As<int32_t>()[2], -2);
}

TEST(ElementwiseLogic, BadInputsThrow) {
  std::mt19937 rng(25);
  Tensor f = RandomOf(DType::kFloat32, {3}, rng);
  Tensor b = RandomOf(DType::kBool, {3}, rng);
  Tensor i = RandomOf(DType::kInt32, {3}, rng);
  EXPECT_THROW(RunNode(MakeNode("Less", 2, 1), {f, i}), Error);
  EXPECT_THROW(RunNode(MakeNode("Less", 2, 1), {b, b}), Error);
  EXPECT_THROW(RunNode(MakeNode("And", 2, 1), {f, f}), Error);
  EXPECT_THROW(RunNode(MakeNode("Not", 1, 1), {i}), Error);
  EXPECT_THROW(RunNode(MakeNode("Equal", 2, 1), {f, RandomOf(DType::kFloat32, {2}, rng)}), Error);
  EXPECT_THROW(RunNode(MakeNode("Where", 3, 1), {f, f, f}), Error);  // cond not bool
  EXPECT_THROW(RunNode(MakeNode("Where", 3, 1), {b, f, i}), Error);  // X/Y dtypes
  EXPECT_THROW(RunNode(MakeNode("Where", 3, 1), {b, f, RandomOf(DType::kFloat32, {4}, rng)}),
               Error);
  EXPECT_THROW(RunNode(MakeNode("Cast", 1, 1), {f}), Error);  // no `to`
  EXPECT_THROW(RunNode(MakeNode("Cast", 1, 1, {{"to", IntAttr(8)}}), {f}), Error);  // string
  EXPECT_THROW(RunNode(MakeNode("Cast", 1, 1, {{"to", IntAttr(99)}}), {f}), Error);
  EXPECT_THROW(RunNode(MakeNode("CastLike", 1, 1), {f}), Error);
}

}  // namespace
}  // namespace testing
}  // namespace kaiwu
