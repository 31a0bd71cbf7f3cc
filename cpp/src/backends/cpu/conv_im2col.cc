#include "backends/cpu/conv_im2col.h"

#include <algorithm>

namespace kaiwu {
namespace cpu {

void Im2Col(const SpatialGeometry& g, const float* x, int64_t c_begin, int64_t c_end, float* col,
            int64_t ld) {
  const int64_t OD = g.out[0], OH = g.out[1], OW = g.out[2];
  const int64_t H = g.in[1], W = g.in[2];
  const int64_t sd = g.stride[0], sh = g.stride[1], sw = g.stride[2];
  for (int64_t c = c_begin; c < c_end; ++c) {
    const float* xc = x + c * g.in_size();
    for (int64_t kd = 0; kd < g.kernel[0]; ++kd) {
      int64_t d_lo, d_hi;
      g.ValidRange(0, kd, &d_lo, &d_hi);
      for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
        int64_t h_lo, h_hi;
        g.ValidRange(1, kh, &h_lo, &h_hi);
        for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
          int64_t w_lo, w_hi;
          g.ValidRange(2, kw, &w_lo, &w_hi);
          const int64_t row = (c * g.kernel[0] + kd) * g.kernel[1] * g.kernel[2] +
                              kh * g.kernel[2] + kw;
          float* dst = col + row * ld;
          const int64_t w_off = kw * g.dilation[2] - g.pad_begin[2];
          for (int64_t od = 0; od < OD; ++od) {
            const bool d_ok = od >= d_lo && od < d_hi;
            const int64_t id = od * sd - g.pad_begin[0] + kd * g.dilation[0];
            for (int64_t oh = 0; oh < OH; ++oh) {
              float* out = dst + (od * OH + oh) * OW;
              if (!d_ok || oh < h_lo || oh >= h_hi) {
                std::fill(out, out + OW, 0.f);
                continue;
              }
              const int64_t ih = oh * sh - g.pad_begin[1] + kh * g.dilation[1];
              const float* src = xc + (id * H + ih) * W + w_off;
              std::fill(out, out + w_lo, 0.f);
              if (sw == 1) {
                for (int64_t ow = w_lo; ow < w_hi; ++ow) out[ow] = src[ow];
              } else {
                for (int64_t ow = w_lo; ow < w_hi; ++ow) out[ow] = src[ow * sw];
              }
              std::fill(out + w_hi, out + OW, 0.f);
            }
          }
        }
      }
    }
  }
}

void DepthwisePlane(const SpatialGeometry& g, const float* x, const float* w, float bias,
                    float* y) {
  const int64_t OH = g.out[1], OW = g.out[2];
  const int64_t H = g.in[1], W = g.in[2];
  const int64_t KH = g.kernel[1], KW = g.kernel[2];
  const int64_t sw = g.stride[2];
  std::fill(y, y + g.out_size(), bias);
  for (int64_t kd = 0; kd < g.kernel[0]; ++kd) {
    int64_t d_lo, d_hi;
    g.ValidRange(0, kd, &d_lo, &d_hi);
    for (int64_t od = d_lo; od < d_hi; ++od) {
      const int64_t id = od * g.stride[0] - g.pad_begin[0] + kd * g.dilation[0];
      for (int64_t kh = 0; kh < KH; ++kh) {
        int64_t h_lo, h_hi;
        g.ValidRange(1, kh, &h_lo, &h_hi);
        for (int64_t oh = h_lo; oh < h_hi; ++oh) {
          const int64_t ih = oh * g.stride[1] - g.pad_begin[1] + kh * g.dilation[1];
          const float* xrow = x + (id * H + ih) * W;
          float* yrow = y + (od * OH + oh) * OW;
          const float* wk = w + (kd * KH + kh) * KW;
          for (int64_t kw = 0; kw < KW; ++kw) {
            int64_t lo, hi;
            g.ValidRange(2, kw, &lo, &hi);
            const float wv = wk[kw];
            const float* src = xrow + kw * g.dilation[2] - g.pad_begin[2];
            if (sw == 1) {
              for (int64_t ow = lo; ow < hi; ++ow) yrow[ow] += wv * src[ow];
            } else {
              for (int64_t ow = lo; ow < hi; ++ow) yrow[ow] += wv * src[ow * sw];
            }
          }
        }
      }
    }
  }
}

}  // namespace cpu
}  // namespace kaiwu
