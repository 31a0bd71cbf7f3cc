// QIm2ColQuad: one quad row written lane by lane, 4 bytes per store. When no
// tap of the quad reaches the padding, a loop over pixels with fixed tap
// offsets. Otherwise, per output row, the pixels where all 4 taps read inside
// the input take a fast
// loop (one unaligned 4-byte load when the taps are 4 consecutive kw of one
// kernel row with dilation 1: 8x8 / stride 4 and 4x4 / stride 2 convs); the
// pixels at the padding take a per-tap loop.
#include "backends/cpu/quant_im2col.h"

#include <algorithm>
#include <cstring>

namespace kaiwu {
namespace cpu {

void QIm2ColQuad(const SpatialGeometry& g, int64_t k_total, const uint8_t* x, int64_t imgs,
                 int64_t channels, int64_t q, uint8_t flip, uint8_t pad, uint32_t* out, int64_t lanes) {
  const int64_t KK = g.kernel_size(), OW = g.out[2], sw = g.stride[2];
  struct Tap {
    bool real;
    int64_t c, kd, kh, kw, lo[3], hi[3];
  } tp[4];
  for (int t = 0; t < 4; ++t) {
    Tap& a = tp[t];
    const int64_t k = 4 * q + t;
    a.real = k < k_total;
    if (!a.real) continue;
    a.c = k / KK;
    const int64_t r = k % KK;
    a.kd = r / (g.kernel[1] * g.kernel[2]);
    a.kh = (r / g.kernel[2]) % g.kernel[1];
    a.kw = r % g.kernel[2];
    g.ValidRange(0, a.kd, &a.lo[0], &a.hi[0]);
    g.ValidRange(1, a.kh, &a.lo[1], &a.hi[1]);
    g.ValidRange(2, a.kw, &a.lo[2], &a.hi[2]);
  }
  bool contiguous = g.dilation[2] == 1;
  for (int t = 0; t < 4; ++t)
    contiguous = contiguous && tp[t].real && tp[t].c == tp[0].c && tp[t].kd == tp[0].kd &&
                 tp[t].kh == tp[0].kh && tp[t].kw == tp[0].kw + t;
  const uint32_t flip4 = flip * 0x01010101u;
  const int64_t in_size = g.in_size();
  bool interior = true;  // every tap inside the input at every pixel
  for (int t = 0; t < 4; ++t)
    for (int d = 0; d < 3; ++d)
      interior = interior && tp[t].real && tp[t].lo[d] == 0 && tp[t].hi[d] == g.out[d];
  if (interior) {
    // Offsets of the taps from a pixel's window origin.
    int64_t off[4];
    for (int t = 0; t < 4; ++t)
      off[t] = tp[t].c * in_size + (tp[t].kd * g.dilation[0] * g.in[1] + tp[t].kh * g.dilation[1]) * g.in[2] +
               tp[t].kw * g.dilation[2];
    int64_t l = 0;
    for (int64_t im = 0; im < imgs; ++im)
      for (int64_t od = 0; od < g.out[0]; ++od)
        for (int64_t oh = 0; oh < g.out[1]; ++oh, l += OW) {
          const uint8_t* row = x + im * channels * in_size +
                               ((od * g.stride[0] - g.pad_begin[0]) * g.in[1] + oh * g.stride[1] - g.pad_begin[1]) * g.in[2] -
                               g.pad_begin[2];
          uint32_t* o = out + l;
          if (contiguous && sw == 4) {  // the lanes are the row's bytes as they are
            const uint8_t* s = row + off[0];
            uint8_t* ob = reinterpret_cast<uint8_t*>(o);
            for (int64_t i = 0; i < 4 * OW; ++i) ob[i] = s[i] ^ flip;
          } else if (contiguous) {
            const uint8_t* s = row + off[0];
            for (int64_t ow = 0; ow < OW; ++ow) {
              uint32_t v;
              std::memcpy(&v, s + ow * sw, 4);
              o[ow] = v ^ flip4;
            }
          } else if (sw == 1) {
            const uint8_t *s0 = row + off[0], *s1 = row + off[1], *s2 = row + off[2], *s3 = row + off[3];
            for (int64_t ow = 0; ow < OW; ++ow)
              o[ow] = (uint32_t(s0[ow]) | uint32_t(s1[ow]) << 8 | uint32_t(s2[ow]) << 16 | uint32_t(s3[ow]) << 24) ^ flip4;
          } else {
            const uint8_t *s0 = row + off[0], *s1 = row + off[1], *s2 = row + off[2], *s3 = row + off[3];
            for (int64_t ow = 0; ow < OW; ++ow) {
              const int64_t i = ow * sw;
              o[ow] = (uint32_t(s0[i]) | uint32_t(s1[i]) << 8 | uint32_t(s2[i]) << 16 | uint32_t(s3[i]) << 24) ^ flip4;
            }
          }
        }
    std::fill(out + l, out + lanes, 0u);
    return;
  }
  int64_t l = 0;
  for (int64_t im = 0; im < imgs; ++im)
    for (int64_t od = 0; od < g.out[0]; ++od)
      for (int64_t oh = 0; oh < g.out[1]; ++oh, l += OW) {
        // Per tap: the row's first byte (at ow = 0) and its valid ow range.
        const uint8_t* src[4];
        int64_t lo[4], hi[4], a = 0, b = OW;
        uint8_t padv[4];
        for (int t = 0; t < 4; ++t) {
          const Tap& p = tp[t];
          const bool ok = p.real && od >= p.lo[0] && od < p.hi[0] && oh >= p.lo[1] && oh < p.hi[1];
          padv[t] = p.real ? pad : 0;
          src[t] = nullptr;
          lo[t] = hi[t] = 0;
          if (ok) {
            const int64_t id = od * g.stride[0] - g.pad_begin[0] + p.kd * g.dilation[0];
            const int64_t ih = oh * g.stride[1] - g.pad_begin[1] + p.kh * g.dilation[1];
            // Offset of ow = 0 (possibly before the row: only [lo, hi) is read).
            src[t] = x + (im * channels + p.c) * in_size + (id * g.in[1] + ih) * g.in[2] +
                     p.kw * g.dilation[2] - g.pad_begin[2];
            lo[t] = p.lo[2];
            hi[t] = std::max(p.hi[2], p.lo[2]);
          }
          a = std::max(a, lo[t]);
          b = std::min(b, hi[t]);
        }
        if (b < a) b = a;
        uint32_t* o = out + l;
        auto edge = [&](int64_t ow) {
          uint32_t v = 0;
          for (int t = 0; t < 4; ++t) {
            const uint32_t byte = ow >= lo[t] && ow < hi[t] ? static_cast<uint8_t>(src[t][ow * sw] ^ flip) : padv[t];
            v |= byte << (8 * t);
          }
          o[ow] = v;
        };
        for (int64_t ow = 0; ow < a; ++ow) edge(ow);
        if (contiguous) {
          const uint8_t* s = src[0];
          for (int64_t ow = a; ow < b; ++ow) {
            uint32_t v;
            std::memcpy(&v, s + ow * sw, 4);
            o[ow] = v ^ flip4;
          }
        } else if (a < b) {
          const uint8_t *s0 = src[0], *s1 = src[1], *s2 = src[2], *s3 = src[3];
          for (int64_t ow = a; ow < b; ++ow) {
            const int64_t i = ow * sw;
            o[ow] = (uint32_t(s0[i]) | uint32_t(s1[i]) << 8 | uint32_t(s2[i]) << 16 | uint32_t(s3[i]) << 24) ^ flip4;
          }
        }
        for (int64_t ow = b; ow < OW; ++ow) edge(ow);
      }
  std::fill(out + l, out + lanes, 0u);
}

}  // namespace cpu
}  // namespace kaiwu
