// The implicit-GEMM Conv path on shapes the small sweep misses: panels that
// span several images, channel counts around the 8-row register tile, wide
// rows (contiguous loads and stores), large strides, groups, fused
// activations, several threads and several chunks of images, against a
// float64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "kernel_harness.h"

namespace kaiwu {
namespace {

using testing::FloatAttr;
using testing::FloatsAttr;
using testing::IntAttr;
using testing::IntsAttr;
using testing::MakeNode;
using testing::RandomTensor;
using testing::RunNode;
using testing::StrAttr;

struct Case {
  int64_t n, c, h, w, m, kh, kw, stride, pad, dil, group;
  std::string act;
};

double Act(const std::string& act, double v) {
  if (act == "Relu") return v > 0 ? v : 0;
  if (act == "Tanh") return std::tanh(v);
  if (act == "LeakyRelu") return v >= 0 ? v : 0.1 * v;
  return v;
}

TEST(ConvPerfImplicit, MatchesReference) {
  const Case cases[] = {
      {3, 4, 84, 84, 32, 8, 8, 4, 0, 1, 1, "Relu"},   // Atari conv1, stride 4
      {5, 32, 20, 20, 64, 4, 4, 2, 0, 1, 1, "Relu"},  // Atari conv2
      {7, 64, 9, 9, 64, 3, 3, 1, 0, 1, 1, ""},        // Atari conv3: 49 columns per image
      {4, 3, 64, 64, 16, 3, 3, 1, 1, 1, 1, ""},       // IMPALA stem, wide rows
      {3, 16, 32, 32, 12, 3, 3, 1, 1, 1, 1, "Tanh"},  // 12 rows: one full tile and a tail
      {2, 6, 17, 19, 20, 3, 5, 2, 2, 2, 2, "LeakyRelu"},
      {3, 8, 8, 8, 9, 3, 3, 1, 1, 1, 1, "Relu"},      // 8 wide: 2 rows per vector
      // Chunks of 3 images (a partial last one, per-thread shares of 5 and 6
      // images with 2 threads), each prefetching the next: 16 wide, 2 vectors a row.
      {11, 16, 16, 16, 12, 3, 3, 1, 1, 1, 1, ""},
      {2, 10, 7, 33, 24, 1, 1, 1, 0, 1, 2, ""},       // grouped pointwise
  };
  std::mt19937 rng(5);
  for (const Case& cs : cases) {
    const int64_t cg = cs.c / cs.group, mg = cs.m / cs.group;
    Tensor x = RandomTensor({cs.n, cs.c, cs.h, cs.w}, rng);
    Tensor w = RandomTensor({cs.m, cg, cs.kh, cs.kw}, rng, -0.3f, 0.3f);
    Tensor b = RandomTensor({cs.m}, rng);
    std::map<std::string, Attribute> attrs = {
        {"strides", IntsAttr({cs.stride, cs.stride})},
        {"pads", IntsAttr({cs.pad, cs.pad, cs.pad, cs.pad})},
        {"dilations", IntsAttr({cs.dil, cs.dil})},
        {"group", IntAttr(cs.group)}};
    if (!cs.act.empty()) {
      attrs["_kaiwu_act"] = StrAttr(cs.act);
      attrs["_kaiwu_act_params"] = FloatsAttr({0.1f, 0.f});
    }
    const int64_t oh = (cs.h + 2 * cs.pad - cs.dil * (cs.kh - 1) - 1) / cs.stride + 1;
    const int64_t ow = (cs.w + 2 * cs.pad - cs.dil * (cs.kw - 1) - 1) / cs.stride + 1;
    std::vector<double> want(cs.n * cs.m * oh * ow);
    const float* xp = x.As<float>();
    const float* wp = w.As<float>();
    for (int64_t i = 0; i < cs.n; ++i)
      for (int64_t m = 0; m < cs.m; ++m)
        for (int64_t p = 0; p < oh; ++p)
          for (int64_t q = 0; q < ow; ++q) {
            double acc = b.As<float>()[m];
            const int64_t g = m / mg;
            for (int64_t c = 0; c < cg; ++c)
              for (int64_t u = 0; u < cs.kh; ++u)
                for (int64_t v = 0; v < cs.kw; ++v) {
                  const int64_t ih = p * cs.stride - cs.pad + u * cs.dil;
                  const int64_t iw = q * cs.stride - cs.pad + v * cs.dil;
                  if (ih < 0 || ih >= cs.h || iw < 0 || iw >= cs.w) continue;
                  acc += double(wp[((m * cg + c) * cs.kh + u) * cs.kw + v]) *
                         xp[((i * cs.c + g * cg + c) * cs.h + ih) * cs.w + iw];
                }
            want[((i * cs.m + m) * oh + p) * ow + q] = Act(cs.act, acc);
          }
    for (int threads : {1, 2, 3}) {
      Tensor y = RunNode(MakeNode("Conv", 3, 1, attrs), {x, w, b}, threads)[0];
      ASSERT_EQ(y.shape(), (Shape{cs.n, cs.m, oh, ow}));
      for (int64_t f = 0; f < y.size(); ++f)
        ASSERT_NEAR(y.As<float>()[f], want[f], 1e-4 * (1 + std::fabs(want[f])))
            << "C=" << cs.c << " M=" << cs.m << " " << cs.h << "x" << cs.w << " k" << cs.kh
            << " s" << cs.stride << " threads " << threads << " at " << f;
    }
  }
}

}  // namespace
}  // namespace kaiwu
