// The channels-last conv tiles (backends/cpu/conv_nhwc.h) against a float64
// reference on every instruction-set variant this machine has: pixel tails of
// every tile height, channel tails inside a 16-wide panel, several panels,
// strides, Relu and another fused activation, with and without bias and an
// added tensor (the fused residual Add), AVX-512's run tiles (pixels of one
// output row) of every height and pixel step they have, bit-identical to the
// tiles that read every row through its offset; and the
// 4-byte transpose (core/transpose.h) at every small width, the 4-channel
// NCHW -> NHWC case included.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/conv_nhwc.h"
#include "backends/cpu/sgemm_packed.h"
#include "backends/cpu/sgemm_packed_isa.h"
#include "core/transpose.h"

namespace kaiwu {
namespace {

std::vector<cpu::PackedIsa> Isas() {
  std::vector<cpu::PackedIsa> isas = {cpu::PackedIsa::kScalar};
  for (cpu::PackedIsa isa : {cpu::PackedIsa::kAvx2, cpu::PackedIsa::kAvx512})
    if (cpu::PackedIsaAvailable(isa)) isas.push_back(isa);
  return isas;
}

struct Case {
  int64_t h, w, c, m, k, s, kind;  // image (already padded), channels, kernel, stride, act
};

TEST(ConvNhwc, TilesMatchFloat64Reference) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  const Case cases[] = {{9, 11, 3, 16, 3, 1, 1}, {13, 7, 5, 13, 3, 2, 0}, {12, 12, 4, 32, 8, 4, 1},
                        {6, 9, 16, 40, 1, 1, 2}, {7, 8, 32, 64, 3, 1, 1}, {5, 30, 2, 1, 2, 3, 2},
                        {10, 10, 7, 24, 5, 1, 0}, {4, 4, 64, 17, 4, 1, 1}, {9, 9, 48, 20, 3, 2, 1},
                        // Rows of one output row: pixel steps (stride x C) 16, 32, 3 and 64,
                        // rows of 32, 18, 64, 8, 21, 9, 28, 17 and 8 pixels; an odd number
                        // of panels (AVX-512 leaves the last one to run tiles) or an even one.
                        {12, 34, 16, 16, 3, 1, 1}, {6, 20, 32, 32, 3, 1, 0}, {5, 66, 3, 16, 3, 1, 1},
                        {10, 10, 32, 32, 3, 1, 2}, {25, 88, 4, 32, 8, 4, 1}, {11, 19, 32, 64, 4, 2, 1},
                        {9, 11, 64, 40, 3, 1, 0}, {7, 30, 16, 13, 3, 1, 1}, {8, 19, 32, 16, 3, 1, 2},
                        {11, 19, 32, 16, 4, 2, 0}};
  constexpr int kFirstRunCase = 9;
  for (const Case& cs : cases) {
    const bool run_case = &cs - cases >= kFirstRunCase;
    const int64_t oh = (cs.h - cs.k) / cs.s + 1, ow = (cs.w - cs.k) / cs.s + 1;
    const int64_t kk = cs.k * cs.k * cs.c, pixels = oh * ow;
    std::vector<float> x(cs.h * cs.w * cs.c), w(cs.m * kk), bias(cs.m);
    for (auto& v : x) v = d(rng);
    for (auto& v : w) v = d(rng);
    for (auto& v : bias) v = d(rng);
    std::vector<float> packed((cs.m + 15) / 16 * 16 * kk);
    cpu::PackB(/*trans_b=*/true, kk, cs.m, w.data(), packed.data());
    std::vector<int32_t> off(pixels);
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j)
        off[i * ow + j] = static_cast<int32_t>((i * cs.s * cs.w + j * cs.s) * cs.c);
    std::vector<float> sum(pixels * cs.m);
    for (auto& v : sum) v = d(rng);
    for (bool with_bias : {true, false})
    for (bool with_sum : {false, true}) {
      cpu::Activation act;
      act.kind = cs.kind == 1 ? FusedActivation::Kind::kRelu
                 : cs.kind == 2 ? FusedActivation::Kind::kTanh
                                : FusedActivation::Kind::kNone;
      // float64 reference: W [M, KH, KW, C] against each pixel's patch.
      std::vector<double> want(pixels * cs.m);
      for (int64_t p = 0; p < pixels; ++p)
        for (int64_t o = 0; o < cs.m; ++o) {
          double s = (with_bias ? bias[o] : 0.0) + (with_sum ? sum[p * cs.m + o] : 0.0);
          for (int64_t a = 0; a < cs.k; ++a)
            for (int64_t q = 0; q < cs.k * cs.c; ++q)
              s += static_cast<double>(x[off[p] + a * cs.w * cs.c + q]) *
                   w[o * kk + a * cs.k * cs.c + q];
          want[p * cs.m + o] = cs.kind == 1 ? std::max(s, 0.0) : cs.kind == 2 ? std::tanh(s) : s;
        }
      for (cpu::PackedIsa isa : Isas()) {
        std::vector<float> first;
        for (bool run_tiles : {true, false}) {
          std::vector<float> y(pixels * cs.m + 1, 12345.f);  // one guard element past the end
          const cpu::NhwcConvProblem pr{x.data(), off.data(), cs.k, cs.k * cs.c, cs.w * cs.c,
                                        cs.m, packed.data(), with_bias ? bias.data() : nullptr,
                                        &act, y.data(), with_sum ? sum.data() : nullptr,
                                        run_tiles};
          // Calls over a split row range and column groups, as threads make
          // them: rows [0, mid) whole, rows [mid, pixels) one group at a time.
          const int64_t mid = pixels / 3, panels = (cs.m + 15) / 16;
          const int64_t group = cpu::NhwcConvPanelGroup(isa);
          const int64_t runs0 = cpu::NhwcConvRunTileCount();
          cpu::NhwcConvRows(isa, pr, 0, mid, 0, panels);
          for (int64_t q = 0; q < panels; q += group)
            cpu::NhwcConvRows(isa, pr, mid, pixels, q, std::min(panels, q + group));
          const int64_t runs = cpu::NhwcConvRunTileCount() - runs0;
          // Run tiles exist on AVX-512 only, for a panel left over by the
          // groups of two.
          if (!run_tiles || isa != cpu::PackedIsa::kAvx512) {
            EXPECT_EQ(runs, 0) << cpu::PackedIsaName(isa);
          } else if (run_case && panels % 2 == 1) {
            EXPECT_GT(runs, 0) << cpu::PackedIsaName(isa) << " case m=" << cs.m << " c=" << cs.c;
          }
          for (int64_t i = 0; i < pixels * cs.m; ++i)
            ASSERT_NEAR(y[i], want[i], 1e-4 * (1 + std::abs(want[i])))
                << cpu::PackedIsaName(isa) << " case m=" << cs.m << " c=" << cs.c
                << " k=" << cs.k << " s=" << cs.s << " run_tiles=" << run_tiles << " element " << i;
          EXPECT_EQ(y[pixels * cs.m], 12345.f) << "wrote past the output";
          if (first.empty()) {
            first = y;
          } else {
            ASSERT_EQ(y, first) << cpu::PackedIsaName(isa) << " case m=" << cs.m << " c=" << cs.c
                                << ": run tiles sum in another order";
          }
        }
      }
    }
  }
}

TEST(Transpose32, EverySmallWidthMatchesNaive) {
  std::mt19937 rng(3);
  for (int64_t cols : {1, 3, 4, 5, 7, 8, 9, 12, 13, 16, 21})
    for (int64_t rows : {1, 7, 8, 9, 16, 17, 40}) {
      const int64_t ld = rows + 3;
      std::vector<float> src(cols * ld), out(rows * cols, -1.f);
      for (auto& v : src) v = static_cast<float>(rng() % 1000);
      Transpose32(src.data(), rows, cols, ld, out.data());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(out[r * cols + c], src[c * ld + r]) << rows << "x" << cols;
    }
}

}  // namespace
}  // namespace kaiwu
