// The CPU's channels-last integer conv (QLinearFused channels_last = 1 over
// weights packed in the Gemm blocks, gemm_layout = 1) against its NCHW form on
// the same random operands: byte-identical outputs at 1 and 3 threads, over
// padding, strides, a K past the last 64 (the AMX tiles' VNNI tail), output
// channels in whole blocks, a partial block and row dots, pixel rows in whole
// 16-row tiles and a tail, and weight zero points (the row sums).
#include <gtest/gtest.h>

#include <random>
#include <vector>

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
                             const std::vector<uint8_t>& wz, const std::vector<float>& bias, int threads) {
  const int64_t k = cc.c * cc.kh * cc.kw;
  const Shape wshape = last ? Shape{cc.m, cc.kh, cc.kw, cc.c} : Shape{cc.m, cc.c, cc.kh, cc.kw};
  std::map<std::string, Attribute> pack_attrs{{"conv", IntAttr(1)}};
  if (last) pack_attrs["gemm_layout"] = IntAttr(1);
  Node pack = MakeNode("QPackWeights", 8, 1, pack_attrs);
  pack.domain = "kaiwu";
  Tensor none;
  const std::vector<Tensor> pack_in = {
      Bytes(DType::kInt8, wshape, last ? ToLast(w, cc.m, cc.c, cc.kh * cc.kw) : w),
      testing::MakeTensor<float>({cc.m}, ws),
      cc.w_zero_points ? Bytes(DType::kInt8, {cc.m}, wz) : none,
      testing::MakeTensor<float>({}, {0.05f}),
      testing::MakeTensor<uint8_t>({}, {7}),
      testing::MakeTensor<float>({cc.m}, bias),
      testing::MakeTensor<float>({}, {0.2f}),
      testing::MakeTensor<uint8_t>({}, {100})};
  std::vector<Tensor> packed = RunNode(pack, pack_in);
  Node conv = MakeNode("QLinearFused", 2, 1,
                       {{"conv", IntAttr(1)}, {"k", IntAttr(k)}, {"n", IntAttr(cc.m)},
                        {"kernel_shape", IntsAttr({cc.kh, cc.kw})}, {"strides", IntsAttr(cc.strides)},
                        {"pads", IntsAttr(cc.pads)}, {"channels_last", IntAttr(last ? 1 : 0)},
                        {"y_dtype", IntAttr(2)}});
  conv.domain = "kaiwu";
  const Shape xshape = last ? Shape{cc.n, cc.h, cc.w, cc.c} : Shape{cc.n, cc.c, cc.h, cc.w};
  std::vector<Tensor> y =
      RunNode(conv, {Bytes(DType::kUInt8, xshape, last ? ToLast(x, cc.n, cc.c, cc.h * cc.w) : x), packed[0]},
              threads);
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

}  // namespace
}  // namespace kaiwu
