// Cast to and from float16 / bfloat16 on the CPU: bit-exact against core/half.h
// and against an independent float64 rounding reference (nearest even,
// overflow to infinity), every 16-bit pattern widened, NaN / inf / subnormal /
// tie cases, the bulk (F16C) path at odd lengths, and every other dtype.
#include <cfloat>
#include <cmath>
#include <limits>

#include "core/half.h"
#include "core/half_convert.h"
#include "elementwise_test_util.h"

namespace kaiwu {
namespace testing {
namespace {

constexpr int kToF16 = 10, kToBF16 = 16, kToF32 = 1, kToF64 = 11;

// The 16-bit float nearest to d (ties to even), as a double, from the format's
// precision alone: `mant` stored mantissa bits, `emin` the smallest normal
// exponent, `max_finite` and the overflow threshold (half an ulp above it).
double RoundToFormat(double d, int mant, int emin, double max_finite) {
  if (std::isnan(d) || d == 0 || std::isinf(d)) return d;
  const double top_ulp = std::ldexp(1.0, std::ilogb(max_finite) - mant);
  if (std::fabs(d) >= max_finite + top_ulp / 2) return std::copysign(INFINITY, d);
  const int e = std::max(std::ilogb(d), emin);
  const double ulp = std::ldexp(1.0, e - mant);
  return std::copysign(std::nearbyint(std::fabs(d) / ulp) * ulp, d);  // exact scaling
}
double RefHalf(double d) { return RoundToFormat(d, 10, -14, 65504.0); }
double RefBFloat16(double d) {
  return RoundToFormat(d, 7, -126, static_cast<double>(BitsFloat(0x7f7f0000u)));
}

Tensor Bits16(DType dt, const std::vector<uint16_t>& bits) {
  Tensor t(dt, {static_cast<int64_t>(bits.size())});
  std::memcpy(t.data(), bits.data(), t.bytes());
  return t;
}

uint16_t Bits(const Tensor& t, int64_t i) { return static_cast<const uint16_t*>(t.data())[i]; }

Tensor CastTo(const Tensor& x, int code) {
  return RunNode(MakeNode("Cast", 1, 1, {{"to", IntAttr(code)}}), {x})[0];
}

// Values that exercise rounding: random normals of every magnitude, the
// subnormal ranges of both formats, exact ties, the overflow edges, specials.
std::vector<float> HardFloats(std::mt19937& rng, int random_count) {
  std::vector<float> v = {0.f, -0.f, 1.f, -1.f, 1.f / 3, 65504.f, 65519.f, 65519.99f, 65520.f,
                          -65520.f, 70000.f, FLT_MAX, -FLT_MAX, FLT_MIN, -FLT_MIN,
                          std::ldexp(1.f, -24), std::ldexp(1.f, -25), std::ldexp(1.5f, -25),
                          std::ldexp(1.f, -26), std::ldexp(1.f, -14), std::ldexp(1023.f, -24),
                          std::ldexp(2047.f, -25),  // ties between subnormals and to normal
                          1.f + std::ldexp(1.f, -11), 1.f + std::ldexp(3.f, -11),
                          1.f + std::ldexp(1.f, -8), 1.f + std::ldexp(3.f, -8),
                          std::ldexp(1.f, -130), std::ldexp(1.f, -149), INFINITY, -INFINITY,
                          BitsFloat(0x7f7f8000u), BitsFloat(0x7f7fffffu)};
  std::uniform_int_distribution<uint32_t> any;
  std::uniform_real_distribution<float> unit(-4.f, 4.f);
  for (int i = 0; i < random_count; ++i) {
    const uint32_t u = any(rng);
    if ((u & 0x7f800000u) == 0x7f800000u) continue;  // specials are listed above
    v.push_back(BitsFloat(u));
    v.push_back(unit(rng));
    // Around the half subnormal and overflow ranges.
    v.push_back(std::ldexp(unit(rng), -16 - static_cast<int>(u % 12)));
    v.push_back(unit(rng) * 16384.f + (u & 1 ? 49152.f : -49152.f));
  }
  return v;
}

TEST(CastHalf, EveryPatternWidensExactly) {
  std::vector<uint16_t> all(65536);
  for (int i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  for (DType dt : {DType::kFloat16, DType::kBFloat16}) {
    const Tensor x = Bits16(dt, all);
    const Tensor f = CastTo(x, kToF32), d = CastTo(x, kToF64);
    ASSERT_EQ(f.dtype(), DType::kFloat32);
    for (int i = 0; i < 65536; ++i) {
      const float want = dt == DType::kFloat16 ? HalfToFloat(all[i]) : BFloat16ToFloat(all[i]);
      const float got = f.As<float>()[i];
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got)) << DTypeName(dt) << " pattern " << i;
        ASSERT_TRUE(std::isnan(d.As<double>()[i]));
        continue;
      }
      ASSERT_EQ(FloatBits(got), FloatBits(want)) << DTypeName(dt) << " pattern " << i;
      ASSERT_EQ(d.As<double>()[i], static_cast<double>(want));
    }
    // Round trip: every non-NaN pattern back to itself.
    const Tensor back = CastTo(f, dt == DType::kFloat16 ? kToF16 : kToBF16);
    for (int i = 0; i < 65536; ++i)
      if (!std::isnan(f.As<float>()[i])) ASSERT_EQ(Bits(back, i), all[i]) << i;
  }
  // A few exact values against the format's definition.
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.f, -24));
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.f);
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(BFloat16ToFloat(0x3f81), 1.0078125f);
}

TEST(CastHalf, FloatNarrowsToNearestEven) {
  std::mt19937 rng(61);
  std::vector<float> v = HardFloats(rng, 50000);
  v.resize((v.size() / 8 - 1) * 8 + 5);  // an odd tail after the vector loop
  Tensor x(DType::kFloat32, {static_cast<int64_t>(v.size())});
  std::memcpy(x.data(), v.data(), x.bytes());
  for (bool bf : {false, true}) {
    const Tensor h = CastTo(x, bf ? kToBF16 : kToF16);
    ASSERT_EQ(h.dtype(), bf ? DType::kBFloat16 : DType::kFloat16);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t got = Bits(h, i);
      ASSERT_EQ(got, bf ? FloatToBFloat16(v[i]) : FloatToHalf(v[i])) << v[i];
      const double want = bf ? RefBFloat16(v[i]) : RefHalf(v[i]);
      const float widened = bf ? BFloat16ToFloat(got) : HalfToFloat(got);
      ASSERT_EQ(FloatBits(widened), FloatBits(static_cast<float>(want)))
          << (bf ? "bfloat16 " : "float16 ") << v[i];
    }
  }
  // Hand-checked bits: ties to even, overflow, subnormals, -0.
  Tensor s = MakeTensor<float>({8}, {65520.f, 65519.f, std::ldexp(1.f, -25),
                                     std::ldexp(1.5f, -25), -0.f, 1.f + std::ldexp(1.f, -11),
                                     1.f + std::ldexp(3.f, -11), -INFINITY});
  const Tensor h = CastTo(s, kToF16);
  const std::vector<uint16_t> want = {0x7c00, 0x7bff, 0x0000, 0x0001, 0x8000, 0x3c00, 0x3c02,
                                      0xfc00};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(Bits(h, i), want[i]) << i;
  Tensor b = MakeTensor<float>({4}, {1.f + std::ldexp(1.f, -8), 1.f + std::ldexp(3.f, -8),
                                     FLT_MAX, BitsFloat(0x7f7f7fffu)});
  const Tensor hb = CastTo(b, kToBF16);
  const std::vector<uint16_t> want_b = {0x3f80, 0x3f82, 0x7f80, 0x7f7f};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Bits(hb, i), want_b[i]) << i;
}

TEST(CastHalf, NaNStaysNaN) {
  Tensor x = MakeTensor<float>({3}, {std::numeric_limits<float>::quiet_NaN(),
                                     -std::numeric_limits<float>::quiet_NaN(),
                                     BitsFloat(0x7f800001u)});  // signalling, low payload
  for (int code : {kToF16, kToBF16}) {
    const Tensor h = CastTo(x, code);
    for (int i = 0; i < 3; ++i) {
      const float back = code == kToF16 ? HalfToFloat(Bits(h, i)) : BFloat16ToFloat(Bits(h, i));
      EXPECT_TRUE(std::isnan(back)) << code << " " << i;
    }
  }
}

TEST(CastHalf, BulkMatchesScalarAtEveryLength) {
  std::mt19937 rng(62);
  const std::vector<float> v = HardFloats(rng, 200);
  for (size_t n = 0; n <= 40; ++n) {
    std::vector<uint16_t> h(n), b(n);
    std::vector<float> hf(n), bf(n);
    FloatToHalfN(v.data(), h.data(), static_cast<int64_t>(n));
    FloatToBFloat16N(v.data(), b.data(), static_cast<int64_t>(n));
    HalfToFloatN(h.data(), hf.data(), static_cast<int64_t>(n));
    BFloat16ToFloatN(b.data(), bf.data(), static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(h[i], FloatToHalf(v[i])) << n << " " << i;
      ASSERT_EQ(b[i], FloatToBFloat16(v[i])) << n << " " << i;
      ASSERT_EQ(FloatBits(hf[i]), FloatBits(HalfToFloat(h[i])));
      ASSERT_EQ(FloatBits(bf[i]), FloatBits(BFloat16ToFloat(b[i])));
    }
  }
  RecordProperty("f16c", HalfConvertUsesF16C() ? "yes" : "no");
}

// Large tensors go through the thread pool in blocks: the result is the same.
TEST(CastHalf, ThreadedMatchesSingle) {
  std::mt19937 rng(63);
  Tensor x = RandomTensor({1000003}, rng, -70000.f, 70000.f);
  for (int code : {kToF16, kToBF16}) {
    Node node = MakeNode("Cast", 1, 1, {{"to", IntAttr(code)}});
    const Tensor one = RunNode(node, {x}, 1)[0], four = RunNode(node, {x}, 4)[0];
    ASSERT_EQ(std::memcmp(one.data(), four.data(), one.bytes()), 0);
    for (int64_t i = 0; i < x.size(); i += 997)
      ASSERT_EQ(Bits(one, i), code == kToF16 ? FloatToHalf(x.As<float>()[i])
                                             : FloatToBFloat16(x.As<float>()[i]));
  }
}

// float64 narrows with one rounding (not through float32's): 1 + 2^-11 + 2^-40
// is just above the tie between 1 and 1 + 2^-10, so it rounds up.
TEST(CastHalf, DoubleRoundsOnce) {
  Tensor d = MakeTensor<double>(
      {6}, {1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40), 1.0 + std::ldexp(1.0, -11),
            1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40), 65519.999999, 1e300, -1e-300});
  const Tensor h = CastTo(d, kToF16), b = CastTo(d, kToBF16);
  EXPECT_EQ(Bits(h, 0), 0x3c01);
  EXPECT_EQ(Bits(h, 1), 0x3c00);
  EXPECT_EQ(Bits(b, 2), 0x3f81);
  EXPECT_EQ(Bits(h, 3), 0x7bff);
  EXPECT_EQ(Bits(h, 4), 0x7c00);
  EXPECT_EQ(Bits(b, 4), 0x7f80);
  EXPECT_EQ(Bits(h, 5), 0x8000);
  std::mt19937 rng(64);
  Tensor r = RandomOf(DType::kFloat64, {20000}, rng, -70000, 70000);
  for (int64_t i = 0; i < r.size(); i += 3) r.As<double>()[i] *= 1e-9;  // subnormal halves
  const Tensor rh = CastTo(r, kToF16), rb = CastTo(r, kToBF16);
  for (int64_t i = 0; i < r.size(); ++i) {
    ASSERT_EQ(static_cast<double>(HalfToFloat(Bits(rh, i))), RefHalf(r.As<double>()[i]))
        << r.As<double>()[i];
    ASSERT_EQ(static_cast<double>(BFloat16ToFloat(Bits(rb, i))), RefBFloat16(r.As<double>()[i]))
        << r.As<double>()[i];
  }
}

// Every other dtype to and from both 16-bit floats, and between the two.
TEST(CastHalf, AllOtherDtypes) {
  std::mt19937 rng(65);
  const std::vector<std::pair<DType, int>> types = {
      {DType::kFloat32, 1}, {DType::kUInt8, 2}, {DType::kInt8, 3},  {DType::kInt16, 5},
      {DType::kInt32, 6},   {DType::kInt64, 7}, {DType::kBool, 9},  {DType::kFloat64, 11}};
  for (auto [from, code] : types) {
    // Integers up to 3000 where the type holds them: past 2048 float16 rounds
    // them (ties to even), past 256 bfloat16 does.
    const double lo = from == DType::kUInt8 || from == DType::kBool ? 0
                      : from == DType::kInt8                        ? -128
                                                                    : -3000;
    const double hi = from == DType::kUInt8 ? 256 : from == DType::kInt8 ? 128 : 3000;
    Tensor x = RandomOf(from, {3001}, rng, lo, hi);
    for (int hc : {kToF16, kToBF16}) {
      const bool bf = hc == kToBF16;
      const Tensor h = CastTo(x, hc);
      for (int64_t i = 0; i < x.size(); ++i) {
        const double want = bf ? RefBFloat16(At(x, i)) : RefHalf(At(x, i));
        const double got = bf ? BFloat16ToFloat(Bits(h, i)) : HalfToFloat(Bits(h, i));
        ASSERT_EQ(got, want) << DTypeName(from) << " -> " << (bf ? "bf16 " : "f16 ") << At(x, i);
      }
      // Back: the widened value converted as float32 would be (truncation, wrap, != 0).
      const Tensor y = CastTo(h, code);
      ASSERT_EQ(y.dtype(), from);
      for (int64_t i = 0; i < x.size(); ++i) {
        const double hv = bf ? BFloat16ToFloat(Bits(h, i)) : HalfToFloat(Bits(h, i));
        // Integer sources round to integers that their type holds: no wrap here.
        const double want = from == DType::kBool ? (hv != 0) : hv;
        ASSERT_EQ(At(y, i), want) << DTypeName(from) << " back from " << hv;
      }
    }
  }
  // Half -> narrow ints truncate then wrap as float32 does; -0 and NaN -> bool.
  Tensor s = MakeTensor<float>({6}, {300.5f, -1.5f, -2.75f, -0.f, NAN, 0.5f});
  const Tensor h = CastTo(s, kToF16);
  EXPECT_EQ(CastTo(h, 2).As<uint8_t>()[0], 44);
  EXPECT_EQ(CastTo(h, 2).As<uint8_t>()[1], 255);
  EXPECT_EQ(CastTo(h, 6).As<int32_t>()[2], -2);
  const Tensor bools = CastTo(h, 9);
  EXPECT_FALSE(bools.As<bool>()[3]);
  EXPECT_TRUE(bools.As<bool>()[4]);
  EXPECT_TRUE(bools.As<bool>()[5]);
  // float16 <-> bfloat16 through float: 1/3 keeps bfloat16's 8 bits; 70000 is
  // finite in bfloat16 and infinite in float16.
  Tensor third = MakeTensor<float>({2}, {1.f / 3, 70000.f});
  const Tensor tb = CastTo(CastTo(third, kToF16), kToBF16);
  EXPECT_EQ(Bits(tb, 0), FloatToBFloat16(HalfToFloat(FloatToHalf(1.f / 3))));
  EXPECT_EQ(Bits(tb, 1), 0x7f80);
  const Tensor th = CastTo(CastTo(third, kToBF16), kToF16);
  EXPECT_EQ(Bits(th, 1), 0x7c00);
  // CastLike takes the target from input 1's dtype.
  Tensor like = RunNode(MakeNode("CastLike", 2, 1), {third, Bits16(DType::kBFloat16, {0})})[0];
  EXPECT_EQ(like.dtype(), DType::kBFloat16);
  EXPECT_EQ(Bits(like, 0), FloatToBFloat16(1.f / 3));
}

}  // namespace
}  // namespace testing
}  // namespace kaiwu
