// Resize against a naive per-element reference (the ONNX spec's coordinate
// formulas evaluated in float, as onnxruntime and the kernel do, so that
// nearest-mode ties round alike; weights and sums in double): nearest,
// bilinear and bicubic on NCHW.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "kernel_harness.h"

namespace kaiwu {
namespace {

using testing::FloatAttr;
using testing::IntAttr;
using testing::MakeNode;
using testing::MakeTensor;
using testing::RandomTensor;
using testing::RunNode;
using testing::StrAttr;

float Original(const std::string& mode, float x, float scale, float in, float out) {
  if (mode == "half_pixel") return (x + 0.5f) / scale - 0.5f;
  if (mode == "pytorch_half_pixel") return out > 1 ? (x + 0.5f) / scale - 0.5f : 0.f;
  if (mode == "align_corners") return out == 1 ? 0.f : x * (in - 1) / (out - 1);
  if (mode == "asymmetric") return x / scale;
  return (x + 0.5f) / scale;  // tf_half_pixel_for_nn
}

// Taps (index, weight) of one axis for one output coordinate.
std::vector<std::pair<int64_t, double>> Taps(const std::string& mode, const std::string& coord,
                                             int64_t o, int64_t in, int64_t out) {
  const float fin = static_cast<float>(in), fout = static_cast<float>(out);
  const double x = Original(coord, static_cast<float>(o), fout / fin, fin, fout);
  auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
  if (mode == "nearest") {  // round_prefer_floor
    double f = std::floor(x);
    return {{clamp(x - f == 0.5 ? static_cast<int64_t>(f) : std::llround(x)), 1.0}};
  }
  if (mode == "linear") {
    double xc = std::clamp(x, 0.0, static_cast<double>(in - 1));
    int64_t x0 = static_cast<int64_t>(std::floor(xc));
    return {{x0, 1 - (xc - x0)}, {clamp(x0 + 1), xc - x0}};
  }
  const double a = -0.75, s = x - std::floor(x);
  auto k = [&](double t) {
    t = std::abs(t);
    return t <= 1 ? (a + 2) * t * t * t - (a + 3) * t * t + 1
                  : t < 2 ? a * t * t * t - 5 * a * t * t + 8 * a * t - 4 * a : 0.0;
  };
  const int64_t x0 = static_cast<int64_t>(std::floor(x));
  return {{clamp(x0 - 1), k(s + 1)}, {clamp(x0), k(s)}, {clamp(x0 + 1), k(1 - s)},
          {clamp(x0 + 2), k(2 - s)}};
}

void CheckResize(const std::string& mode, const std::string& coord, Shape in, Shape out,
                 int threads) {
  std::mt19937 rng(11);
  Tensor x = RandomTensor(in, rng);
  Node node = MakeNode("Resize", 4, 1, {{"mode", StrAttr(mode)},
                                        {"coordinate_transformation_mode", StrAttr(coord)}});
  std::vector<Tensor> ins = {x, Tensor(), Tensor(), MakeTensor<int64_t>({4}, out)};
  Tensor y = RunNode(node, ins, threads)[0];
  ASSERT_EQ(ShapeToString(y.shape()), ShapeToString(out));
  const int64_t H = in[2], W = in[3], OH = out[2], OW = out[3];
  for (int64_t p = 0; p < in[0] * in[1]; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double want = 0;
        for (auto [ih, wh] : Taps(mode, coord, oh, H, OH))
          for (auto [iw, ww] : Taps(mode, coord, ow, W, OW))
            want += wh * ww * x.As<float>()[(p * H + ih) * W + iw];
        float got = y.As<float>()[(p * OH + oh) * OW + ow];
        ASSERT_NEAR(got, want, 1e-4 * (1 + std::abs(want)))
            << mode << "/" << coord << " plane " << p << " at " << oh << "," << ow;
      }
}

TEST(GameResize, MatchesNaiveReference) {
  for (const char* mode : {"nearest", "linear", "cubic"})
    for (const char* coord : {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"})
      for (int threads : {1, 3}) {
        CheckResize(mode, coord, {2, 3, 5, 7}, {2, 3, 9, 13}, threads);   // upsample
        CheckResize(mode, coord, {1, 2, 12, 10}, {1, 2, 5, 4}, threads);  // downsample
        CheckResize(mode, coord, {1, 2, 4, 6}, {1, 2, 1, 9}, threads);    // to one row
      }
}

TEST(GameResize, NearestIntegersAndScales) {
  Node node = MakeNode("Resize", 3, 1, {{"mode", StrAttr("nearest")}});
  Tensor x = MakeTensor<int64_t>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor y = RunNode(node, {x, Tensor(), MakeTensor<float>({4}, {1, 1, 2, 1.5f})})[0];
  ASSERT_EQ(ShapeToString(y.shape()), "(1, 1, 4, 3)");
  std::vector<int64_t> want = {1, 1, 2, 1, 1, 2, 3, 3, 4, 3, 3, 4};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(y.As<int64_t>()[i], want[i]) << i;
}

TEST(GameResize, RejectsBadOptions) {
  std::mt19937 rng(3);
  Tensor x = RandomTensor({1, 1, 4, 4}, rng);
  Tensor scales = MakeTensor<float>({4}, {1, 1, 0.5f, 0.5f});
  Tensor sizes = MakeTensor<int64_t>({4}, {1, 1, 2, 2});
  auto run = [&](std::map<std::string, Attribute> attrs, bool both) {
    Node node = MakeNode("Resize", 4, 1, std::move(attrs));
    return RunNode(node, {x, Tensor(), both ? scales : Tensor(), sizes});
  };
  EXPECT_THROW(run({{"mode", StrAttr("linear")}, {"antialias", IntAttr(1)}}, false), Error);
  EXPECT_THROW(run({{"mode", StrAttr("bogus")}}, false), Error);
  EXPECT_THROW(run({{"mode", StrAttr("linear")}}, true), Error);  // scales and sizes
  EXPECT_THROW(run({{"coordinate_transformation_mode", StrAttr("tf_crop_and_resize")}}, false),
               Error);  // no roi
  Node ok = MakeNode("Resize", 4, 1, {{"extrapolation_value", FloatAttr(1.f)}});
  EXPECT_NO_THROW(RunNode(ok, {x, Tensor(), Tensor(), sizes}));
}

}  // namespace
}  // namespace kaiwu
