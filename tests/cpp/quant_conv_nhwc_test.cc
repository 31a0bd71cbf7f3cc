// The CPU's channels-last integer conv (QLinearFused channels_last = 1 over
// weights packed in the Gemm blocks, gemm_layout = 1) against its NCHW form on
// the same random operands: byte-identical outputs at 1 and 3 threads, over
// padding, strides, a K past the last 64 (the AMX tiles' VNNI tail), output
// channels in whole blocks, a partial block and row dots, pixel rows in whole
// 16-row tiles and a tail, and weight zero points (the row sums).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backends/cpu/quant_gemm.h"
#include "kernel_harness.h"

namespace kaiwu {
namespace {

using testing::FloatAttr;
using testing::IntAttr;
using testing::IntsAttr;
using testing::MakeNode;
using testing::RunNode;

struct ConvCase {
  int64_t n, c, h, w, m, kh, kw;
  std::vector<int64_t> strides, pads;
  bool w_zero_points;
  std::vector<int64_t> dilations = {1, 1};
  int weights = 0;        // 0: full int8 range; 1: no -128 (the shifted AVX2 tiles); 2: pairs fit int16
  bool x_signed = false;  // int8 x (read as x + 128)
};

// [M, C, KH, KW] -> [M, KH, KW, C] and [N, C, H, W] -> [N, H, W, C] (bytes).
std::vector<uint8_t> ToLast(const std::vector<uint8_t>& v, int64_t a, int64_t c, int64_t rest) {
  std::vector<uint8_t> out(v.size());
  for (int64_t i = 0; i < a; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t r = 0; r < rest; ++r) out[(i * rest + r) * c + ch] = v[(i * c + ch) * rest + r];
  return out;
}

Tensor Bytes(DType dt, Shape shape, const std::vector<uint8_t>& v) {
  Tensor t(dt, std::move(shape));
  std::memcpy(t.data(), v.data(), v.size());
  return t;
}

// Packs (QPackWeights) and runs (QLinearFused) one layout; returns the output bytes.
std::vector<uint8_t> RunConv(const ConvCase& cc, bool last, const std::vector<uint8_t>& x,
                             const std::vector<uint8_t>& w, const std::vector<float>& ws,
                             const std::vector<uint8_t>& wz, const std::vector<float>& bias, int threads,
                             int64_t row_bytes = 0, int64_t conv_row_bytes = -1) {
  const int64_t k = cc.c * cc.kh * cc.kw;
  const Shape wshape = last ? Shape{cc.m, cc.kh, cc.kw, cc.c} : Shape{cc.m, cc.c, cc.kh, cc.kw};
  std::map<std::string, Attribute> pack_attrs{{"conv", IntAttr(1)}};
  if (last) pack_attrs["gemm_layout"] = IntAttr(1);
  if (row_bytes) {
    pack_attrs["k_rows"] = IntAttr(cc.kh);
    pack_attrs["row_bytes"] = IntAttr(row_bytes);
  }
  Node pack = MakeNode("QPackWeights", 8, 1, pack_attrs);
  pack.domain = "kaiwu";
  Tensor none;
  const std::vector<Tensor> pack_in = {
      Bytes(DType::kInt8, wshape, last ? ToLast(w, cc.m, cc.c, cc.kh * cc.kw) : w),
      testing::MakeTensor<float>({cc.m}, ws),
      cc.w_zero_points ? Bytes(DType::kInt8, {cc.m}, wz) : none,
      testing::MakeTensor<float>({}, {0.05f}),
      cc.x_signed ? testing::MakeTensor<int8_t>({}, {-5}) : testing::MakeTensor<uint8_t>({}, {7}),
      testing::MakeTensor<float>({cc.m}, bias),
      testing::MakeTensor<float>({}, {0.2f}),
      testing::MakeTensor<uint8_t>({}, {100})};
  std::vector<Tensor> packed = RunNode(pack, pack_in);
  std::map<std::string, Attribute> conv_attrs{
      {"conv", IntAttr(1)}, {"k", IntAttr(k)}, {"n", IntAttr(cc.m)},
      {"kernel_shape", IntsAttr({cc.kh, cc.kw})}, {"strides", IntsAttr(cc.strides)},
      {"pads", IntsAttr(cc.pads)}, {"dilations", IntsAttr(cc.dilations)},
      {"channels_last", IntAttr(last ? 1 : 0)}, {"y_dtype", IntAttr(2)}};
  if (conv_row_bytes < 0) conv_row_bytes = row_bytes;
  if (conv_row_bytes) conv_attrs["row_bytes"] = IntAttr(conv_row_bytes);
  Node conv = MakeNode("QLinearFused", 2, 1, conv_attrs);
  conv.domain = "kaiwu";
  const Shape xshape = last ? Shape{cc.n, cc.h, cc.w, cc.c} : Shape{cc.n, cc.c, cc.h, cc.w};
  const DType xdt = cc.x_signed ? DType::kInt8 : DType::kUInt8;
  std::vector<Tensor> y =
      RunNode(conv, {Bytes(xdt, xshape, last ? ToLast(x, cc.n, cc.c, cc.h * cc.w) : x), packed[0]}, threads);
  const uint8_t* p = static_cast<const uint8_t*>(y[0].data());
  return std::vector<uint8_t>(p, p + y[0].bytes());
}

TEST(QuantConvNhwc, ChannelsLastEqualsNchwBytes) {
  std::mt19937 rng(21);
  std::uniform_int_distribution<int> u8(0, 255), s8(-128, 127), zp(-3, 3);
  std::uniform_real_distribution<float> scale(0.002f, 0.01f), b(-1.f, 1.f);
  const std::vector<ConvCase> cases = {
      {3, 5, 9, 11, 21, 3, 3, {2, 1}, {1, 1, 1, 1}, false},   // K 45 (kp 48), 16 + 5 channels (row dots)
      {2, 24, 8, 10, 37, 3, 3, {1, 1}, {1, 0, 1, 2}, true},  // K 216: AMX steps + a VNNI tail; 37 channels
      {2, 4, 20, 20, 32, 8, 8, {4, 4}, {0, 0, 0, 0}, false},  // a Nature CNN first conv's runs (32 bytes)
      {1, 16, 7, 7, 25, 2, 2, {1, 1}, {0, 0, 0, 0}, true},   // 36 pixel rows, 16 + 9 channels (a tile)
  };
  for (const ConvCase& cc : cases) {
    const int64_t k = cc.c * cc.kh * cc.kw;
    std::vector<uint8_t> x(cc.n * cc.c * cc.h * cc.w), w(cc.m * k), wz(cc.m);
    for (auto& v : x) v = static_cast<uint8_t>(u8(rng));
    for (auto& v : w) v = static_cast<uint8_t>(s8(rng));
    for (auto& v : wz) v = static_cast<uint8_t>(zp(rng));
    std::vector<float> ws(cc.m), bias(cc.m);
    for (auto& v : ws) v = scale(rng);
    for (auto& v : bias) v = b(rng);
    const std::vector<uint8_t> ref = RunConv(cc, false, x, w, ws, wz, bias, 1);
    int distinct = 0;
    std::vector<bool> seen(256);
    for (uint8_t v : ref) distinct += seen[v] ? 0 : (seen[v] = true, 1);
    ASSERT_GT(distinct, 20) << "saturated outputs: the comparison could not fail";
    const int64_t pixels = ref.size() / (cc.n * cc.m);  // output pixels an image
    const std::vector<uint8_t> ref_last = ToLast(ref, cc.n, cc.m, pixels);
    for (int threads : {1, 3}) {
      const std::vector<uint8_t> got = RunConv(cc, true, x, w, ws, wz, bias, threads);
      ASSERT_EQ(got.size(), ref_last.size());
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(int(got[i]), int(ref_last[i])) << "case c=" << cc.c << " m=" << cc.m << " threads=" << threads
                                                 << " at " << i;
    }
  }
}

// Random operands of a case (weights in the case's range).
struct ConvOperands {
  std::vector<uint8_t> x, w, wz;
  std::vector<float> ws, bias;
};

ConvOperands RandomOperands(const ConvCase& cc, std::mt19937& rng) {
  const int lo = cc.weights == 0 ? -128 : cc.weights == 1 ? -127 : -60, hi = cc.weights == 2 ? 60 : 127;
  std::uniform_int_distribution<int> u8(0, 255), s8(lo, hi), zp(-3, 3);
  std::uniform_real_distribution<float> scale(0.002f, 0.01f), b(-1.f, 1.f);
  const int64_t k = cc.c * cc.kh * cc.kw;
  ConvOperands o;
  o.x.resize(cc.n * cc.c * cc.h * cc.w);
  o.w.resize(cc.m * k);
  o.wz.resize(cc.m);
  for (auto& v : o.x) v = static_cast<uint8_t>(u8(rng));
  for (auto& v : o.w) v = static_cast<uint8_t>(s8(rng));
  for (auto& v : o.wz) v = static_cast<uint8_t>(zp(rng));
  o.ws.resize(cc.m);
  o.bias.resize(cc.m);
  for (auto& v : o.ws) v = scale(rng);
  for (auto& v : o.bias) v = b(rng);
  return o;
}

// Kernel rows read in place (QPackWeights k_rows / row_bytes, QLinearFused
// row_bytes: RunConvInPlace) against the NCHW form: byte-identical on every
// int8 path the CPU has, rows padded to 4 and to 64 bytes (each path takes
// either), at 1 and 3 threads; over padding on every side, strides, a
// dilation along H, output rows shorter than a tile and past whole tiles (AMX
// rows past the row's end), int8 x, weight zero points, and the weights of
// the shifted and the pair-sum AVX2 tiles.
TEST(QuantConvNhwc, InPlaceRowsEqualNchwBytes) {
  std::mt19937 rng(33);
  const std::vector<ConvCase> cases = {
      {2, 3, 13, 13, 16, 3, 3, {1, 1}, {1, 1, 1, 1}, false},                 // IMPALA's first conv: runs of 9
      {2, 16, 5, 37, 32, 3, 3, {1, 1}, {1, 1, 1, 1}, true},                  // 37 = 32 + 5 pixels a row
      {2, 4, 20, 20, 32, 8, 8, {4, 4}, {0, 0, 0, 0}, false, {1, 1}, 1},      // Nature CNN's first conv
      {1, 24, 11, 9, 29, 3, 3, {2, 1}, {1, 0, 2, 2}, true, {2, 1}, 0, true},  // dilation 2 along H, int8 x
      {3, 5, 6, 9, 16, 2, 3, {1, 2}, {0, 1, 1, 0}, false, {1, 1}, 2},       // pairs fit int16
      {1, 32, 8, 8, 48, 3, 3, {1, 1}, {1, 1, 1, 1}, false, {1, 1}, 1},       // 8-pixel rows, 3 blocks
  };
  const cpu::QIsa saved = cpu::QGemmIsa();
  for (const ConvCase& cc : cases) {
    const ConvOperands o = RandomOperands(cc, rng);
    const std::vector<uint8_t> ref = RunConv(cc, false, o.x, o.w, o.ws, o.wz, o.bias, 1);
    int distinct = 0;
    std::vector<bool> seen(256);
    for (uint8_t v : ref) distinct += seen[v] ? 0 : (seen[v] = true, 1);
    ASSERT_GT(distinct, 20) << "saturated outputs: the comparison could not fail";
    const int64_t pixels = ref.size() / (cc.n * cc.m);
    const std::vector<uint8_t> ref_last = ToLast(ref, cc.n, cc.m, pixels);
    const int64_t run = cc.kw * cc.c;
    for (cpu::QIsa isa : {cpu::QIsa::kScalar, cpu::QIsa::kAvx2, cpu::QIsa::kAvx512Vnni, cpu::QIsa::kAmx}) {
      if (!cpu::QIsaSupported(isa)) continue;
      cpu::SetQGemmIsa(isa);
      for (int64_t align : {4, 64})
        for (int threads : {1, 3}) {
          const int64_t row_bytes = (run + align - 1) / align * align;
          const std::vector<uint8_t> got = RunConv(cc, true, o.x, o.w, o.ws, o.wz, o.bias, threads, row_bytes);
          ASSERT_EQ(got.size(), ref_last.size());
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_EQ(int(got[i]), int(ref_last[i]))
                << "case c=" << cc.c << " m=" << cc.m << " isa=" << cpu::QIsaName(isa) << " row_bytes=" << row_bytes
                << " threads=" << threads << " at " << i;
        }
    }
  }
  cpu::SetQGemmIsa(saved);
}

// A packing whose rows differ from the conv's is refused with the sizes named.
TEST(QuantConvNhwc, InPlaceRowsMismatchIsRefused) {
  std::mt19937 rng(5);
  const ConvCase cc{1, 16, 6, 6, 16, 3, 3, {1, 1}, {1, 1, 1, 1}, false};
  const ConvOperands o = RandomOperands(cc, rng);
  for (auto [pack_rows, conv_rows] : {std::pair<int64_t, int64_t>{48, 64}, {0, 64}, {64, 0}}) {
    try {
      RunConv(cc, true, o.x, o.w, o.ws, o.wz, o.bias, 1, pack_rows, conv_rows);
      FAIL() << "packed with row_bytes " << pack_rows << ", read with " << conv_rows << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("packed operand"), std::string::npos) << e.what();
    }
  }
}

// NhwcMaxPool over bytes (a pool hoisted above its DequantizeLinear) against
// MaxPool over the same bytes NCHW: channels in whole 16-byte vectors and a
// tail, padding, strides, uint8 and int8, 1 and 3 threads.
TEST(QuantConvNhwc, BytePoolChannelsLastEqualsNchw) {
  std::mt19937 rng(8);
  std::uniform_int_distribution<int> u8(0, 255);
  for (DType dt : {DType::kUInt8, DType::kInt8})
    for (int64_t c : {16, 21, 5}) {
      const int64_t n = 2, h = 9, w = 11;
      std::vector<uint8_t> x(n * c * h * w);
      for (auto& v : x) v = static_cast<uint8_t>(u8(rng));
      const std::map<std::string, Attribute> attrs{{"kernel_shape", IntsAttr({3, 3})},
                                                   {"strides", IntsAttr({2, 2})},
                                                   {"pads", IntsAttr({1, 1, 1, 1})}};
      const std::vector<Tensor> ref = RunNode(MakeNode("MaxPool", 1, 1, attrs), {Bytes(dt, {n, c, h, w}, x)});
      const int64_t pixels = ref[0].size() / (n * c);
      const uint8_t* rp = static_cast<const uint8_t*>(ref[0].data());
      const std::vector<uint8_t> want = ToLast(std::vector<uint8_t>(rp, rp + ref[0].bytes()), n, c, pixels);
      Node pool = MakeNode("NhwcMaxPool", 1, 1, attrs);
      pool.domain = "kaiwu";
      for (int threads : {1, 3}) {
        const std::vector<Tensor> got = RunNode(pool, {Bytes(dt, {n, h, w, c}, ToLast(x, n, c, h * w))}, threads);
        ASSERT_EQ(got[0].dtype(), dt);
        const uint8_t* gp = static_cast<const uint8_t*>(got[0].data());
        ASSERT_EQ(std::vector<uint8_t>(gp, gp + got[0].bytes()), want) << "c=" << c << " threads=" << threads;
      }
    }
}

}  // namespace
}  // namespace kaiwu
