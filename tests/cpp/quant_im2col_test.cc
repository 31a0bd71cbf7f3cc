// QIm2ColQuad (the fused int8 conv's im2col) against a naive per-byte
// reference: 1-D, 2-D and 3-D geometries with padding, strides, dilation,
// reduction lengths that are not a multiple of 4, windows of 4 consecutive
// bytes (stride 4 and 2), and the zero lanes past the last pixel.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "backends/cpu/quant_im2col.h"

namespace kaiwu {
namespace cpu {
namespace {

struct Geo {
  int nd;
  std::vector<int64_t> in, kernel, stride, dilation, pad_begin, pad_end;
};

int64_t CeilDiv(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

SpatialGeometry Make(const Geo& c) {
  SpatialGeometry g;
  g.nd = c.nd;
  for (int i = 0; i < c.nd; ++i) {
    const int d = 3 - c.nd + i;
    g.in[d] = c.in[i];
    g.kernel[d] = c.kernel[i];
    g.stride[d] = c.stride[i];
    g.dilation[d] = c.dilation[i];
    g.pad_begin[d] = c.pad_begin[i];
    g.pad_end[d] = c.pad_end[i];
    g.out[d] = (c.in[i] + c.pad_begin[i] + c.pad_end[i] - (c.kernel[i] - 1) * c.dilation[i] - 1) / c.stride[i] + 1;
  }
  for (int d = 0; d < 3; ++d)
    for (int64_t k = 0; k < g.kernel[d]; ++k) {
      const int64_t off = k * g.dilation[d] - g.pad_begin[d];
      const int64_t lo = std::clamp<int64_t>(CeilDiv(-off, g.stride[d]), 0, g.out[d]);
      g.valid_lo[d].push_back(lo);
      g.valid_hi[d].push_back(std::clamp<int64_t>(CeilDiv(g.in[d] - off, g.stride[d]), lo, g.out[d]));
    }
  return g;
}

TEST(QuantIm2Col, QuadRowsMatchNaiveReference) {
  const Geo cases[] = {
      {2, {7, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},    // k = 27 per channel
      {2, {13, 13}, {4, 4}, {2, 2}, {1, 1}, {1, 2}, {0, 1}},  // 4-byte windows, padded
      {2, {16, 16}, {8, 8}, {4, 4}, {1, 1}, {0, 0}, {0, 0}},  // 4-byte windows, stride 4
      {2, {9, 9}, {3, 3}, {1, 1}, {2, 2}, {0, 0}, {0, 0}},    // dilation
      {2, {9, 8}, {2, 3}, {2, 1}, {1, 1}, {0, 0}, {0, 0}},    // strided rows
      {1, {11}, {4}, {1}, {1}, {0}, {0}},                     // 4-byte windows, stride 1
      {1, {12}, {4}, {3}, {1}, {2}, {1}},                     // stride 3
      {3, {4, 5, 6}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, {1, 0, 1}, {0, 1, 1}},
  };
  std::mt19937 rng(3);
  for (const Geo& c : cases)
    for (int64_t channels : {1, 3, 4})
      for (uint8_t flip : {0, 0x80}) {
        const SpatialGeometry g = Make(c);
        const int64_t imgs = 3, P = g.out_size(), KK = g.kernel_size(), K = channels * KK;
        const int64_t lanes = (imgs * P + 31) / 32 * 32 + 32;
        std::vector<uint8_t> x(imgs * channels * g.in_size());
        for (auto& v : x) v = static_cast<uint8_t>(rng());
        const uint8_t pad = 77;
        std::vector<uint32_t> out(lanes);
        for (int64_t q = 0; q < (K + 3) / 4; ++q) {
          std::fill(out.begin(), out.end(), 0xdeadbeefu);
          QIm2ColQuad(g, K, x.data(), imgs, channels, q, flip, pad, out.data(), lanes);
          for (int64_t l = 0; l < lanes; ++l) {
            uint32_t want = 0;
            for (int t = 0; t < 4 && l < imgs * P; ++t) {
              const int64_t k = 4 * q + t;
              if (k >= K) continue;
              const int64_t ch = k / KK, r = k % KK, im = l / P, px = l % P;
              const int64_t kk[3] = {r / (g.kernel[1] * g.kernel[2]), (r / g.kernel[2]) % g.kernel[1], r % g.kernel[2]};
              const int64_t o[3] = {px / (g.out[1] * g.out[2]), (px / g.out[2]) % g.out[1], px % g.out[2]};
              int64_t at = 0;
              bool in = true;
              for (int d = 0; d < 3; ++d) {
                const int64_t i = o[d] * g.stride[d] - g.pad_begin[d] + kk[d] * g.dilation[d];
                in = in && i >= 0 && i < g.in[d];
                at = at * g.in[d] + i;
              }
              const uint32_t byte = in ? static_cast<uint8_t>(x[(im * channels + ch) * g.in_size() + at] ^ flip) : pad;
              want |= byte << (8 * t);
            }
            ASSERT_EQ(out[l], want) << "nd=" << c.nd << " channels=" << channels << " flip=" << int(flip)
                                    << " q=" << q << " lane=" << l;
          }
        }
      }
}

}  // namespace
}  // namespace cpu
}  // namespace kaiwu
