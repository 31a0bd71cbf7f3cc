#include "backends/cpu/conv_direct.h"

#include <algorithm>
#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
#define KAIWU_CONV_DIRECT 1
#endif

namespace kaiwu {
namespace cpu {

bool ConvDirect::Supported(const SpatialGeometry& g, int64_t n, int64_t c, int64_t m,
                           int64_t group) {
#ifdef KAIWU_CONV_DIRECT
  const bool plain_2d = g.in[0] == 1 && g.kernel[0] == 1 && g.stride[1] == 1 &&
                        g.stride[2] == 1 && g.dilation[1] == 1 && g.dilation[2] == 1;
  // Row segments need rows of 16+ pixels (narrower ones would leave most lanes
  // empty: the packed path does better); flat segments need W == OW.
  const bool rows = g.out[2] >= 16;
  if (!plain_2d || group != 1 || !(rows || g.in[2] == g.out[2]) || n <= 0 || c <= 0 || m <= 0 ||
      g.out_size() <= 0)
    return false;
  const int64_t segs = rows ? g.out[1] * ((g.out[2] + 15) / 16) : (g.out_size() + 15) / 16;
  return segs * g.kernel_size() <= (int64_t{1} << 22);  // (tap, segment) tables stay small
#else
  (void)g, (void)n, (void)c, (void)m, (void)group;
  return false;
#endif
}

ConvDirect::ConvDirect(const SpatialGeometry& g, int64_t n, int64_t c, int64_t m,
                       const Activation& act)
    : geo_(g), act_(act), n_(n), c_(c), m_(m) {
  const int64_t H = g.in[1], W = g.in[2], OH = g.out[1], OW = g.out[2], P = g.out_size();
  const int64_t KH = g.kernel[1], KW = g.kernel[2], taps = KH * KW;
  k_ = c * taps;
  const bool rows = OW >= 16;  // else flat segments (W == OW)
  const int64_t per_row = (OW + 15) / 16;
  segs_ = rows ? OH * per_row : (P + 15) / 16;
  strips_ = (segs_ + kSegs - 1) / kSegs;
  in_off_.assign(taps * segs_, 0);
  in_mask_.assign(taps * segs_, 0);
  out_off_.assign(segs_, 0);
  out_mask_.assign(segs_, 0);
  for (int64_t s = 0; s < segs_; ++s) {
    // Lane l is output pixel p0 + l of the flattened image (at most 16 lanes).
    const int64_t p0 = rows ? (s / per_row) * OW + (s % per_row) * 16 : s * 16;
    const int64_t lanes = rows ? std::min<int64_t>(16, OW - (s % per_row) * 16)
                               : std::min<int64_t>(16, P - p0);
    out_off_[s] = p0;
    out_mask_[s] = static_cast<uint16_t>((uint32_t{1} << lanes) - 1);
    for (int64_t kh = 0; kh < KH; ++kh)
      for (int64_t kw = 0; kw < KW; ++kw) {
        const int64_t t = kh * KW + kw;
        uint32_t mask = 0;
        for (int64_t l = 0; l < lanes; ++l) {
          const int64_t oh = (p0 + l) / OW, ow = (p0 + l) % OW;
          const int64_t ih = oh - g.pad_begin[1] + kh, iw = ow - g.pad_begin[2] + kw;
          mask |= static_cast<uint32_t>(ih >= 0 && ih < H && iw >= 0 && iw < W) << l;
        }
        // Lane l reads input (oh0 + dh) * W + ow0 + l + dw: consecutive within
        // a row segment, and across rows too when W == OW.
        const int64_t oh0 = p0 / OW, ow0 = p0 % OW;
        const int64_t off = (oh0 - g.pad_begin[1] + kh) * W + ow0 - g.pad_begin[2] + kw;
        // A fully masked load reads nothing; keep its address inside x anyway.
        in_off_[t * segs_ + s] = mask ? off : 0;
        in_mask_[t * segs_ + s] = static_cast<uint16_t>(mask);
      }
  }
}

void ConvDirect::Run(const float* x, const float* w, const float* bias, float* y,
                     ThreadPool* pool) const {
  const int64_t tasks = n_ * strips_;
  auto run = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) Strip(x, w, bias, y, t / strips_, (t % strips_) * kSegs);
  };
  const double cost = 2.0 * static_cast<double>(m_ * k_ * 16 * kSegs);
  if (pool) {
    pool->ParallelFor(tasks, cost, run);
  } else {
    run(0, tasks);
  }
}

#ifdef KAIWU_CONV_DIRECT
namespace {

// acc[8][NV] over every (tap, channel); B vectors are masked loads of input
// rows, A values broadcasts of 8 weight rows. The loops over rows and
// vectors are unrolled everywhere (the tail rows only skip their stores), so
// the accumulators never need an address and stay in registers.
template <int NV>
void DirectTile(int64_t C, int64_t HW, int64_t taps, int64_t K, const float* x,
                const int64_t* off, const uint16_t* mask, int64_t tap_stride, const float* w,
                int rows, const float* bias, const Activation& act, float* const* dst,
                const uint16_t* store_mask, int64_t P) {
  __m512 acc[8][NV];
#pragma GCC unroll 8
  for (int r = 0; r < 8; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t t = 0; t < taps; ++t) {
    const float* xv[NV];
    __mmask16 mv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      xv[v] = x + off[t * tap_stride + v];
      mv[v] = static_cast<__mmask16>(mask[t * tap_stride + v]);
    }
    const float* a[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) a[r] = w + std::min(r, rows - 1) * K + t;
    for (int64_t c = 0; c < C; ++c) {
      __m512 b[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) b[v] = _mm512_maskz_loadu_ps(mv[v], xv[v] + c * HW);
      const int64_t k = c * taps;
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) {
        const __m512 av = _mm512_set1_ps(a[r][k]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, b[v], acc[r][v]);
      }
    }
  }
  const bool relu = act.kind == Activation::Kind::kRelu;
  const bool other = act.active() && !relu;
#pragma GCC unroll 8
  for (int r = 0; r < 8; ++r) {
    if (r >= rows) break;
    const __m512 bv = _mm512_set1_ps(bias ? bias[r] : 0.f);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      __m512 o = _mm512_add_ps(acc[r][v], bv);
      if (relu) o = _mm512_max_ps(o, _mm512_setzero_ps());
      if (other) {
        alignas(64) float tmp[16];
        _mm512_store_ps(tmp, o);
        act.Apply(tmp, 16);
        o = _mm512_load_ps(tmp);
      }
      _mm512_mask_storeu_ps(dst[v] + r * P, static_cast<__mmask16>(store_mask[v]), o);
    }
  }
}

}  // namespace

void ConvDirect::Strip(const float* x, const float* w, const float* bias, float* y, int64_t img,
                       int64_t seg0) const {
  const int64_t HW = geo_.in_size(), P = geo_.out_size(), taps = geo_.kernel_size();
  const int nv = static_cast<int>(std::min<int64_t>(kSegs, segs_ - seg0));
  const float* xi = x + img * c_ * HW;
  const int64_t* off = in_off_.data() + seg0;
  const uint16_t* mask = in_mask_.data() + seg0;
  const uint16_t* store_mask = out_mask_.data() + seg0;
  for (int64_t m0 = 0; m0 < m_; m0 += kMr) {
    const int rows = static_cast<int>(std::min<int64_t>(kMr, m_ - m0));
    float* d[kSegs];
    for (int v = 0; v < nv; ++v) d[v] = y + (img * m_ + m0) * P + out_off_[seg0 + v];
    const float* bm = bias ? bias + m0 : nullptr;
    const float* wm = w + m0 * k_;
    switch (nv) {
      case 1: DirectTile<1>(c_, HW, taps, k_, xi, off, mask, segs_, wm, rows, bm, act_, d, store_mask, P); break;
      case 2: DirectTile<2>(c_, HW, taps, k_, xi, off, mask, segs_, wm, rows, bm, act_, d, store_mask, P); break;
      default: DirectTile<3>(c_, HW, taps, k_, xi, off, mask, segs_, wm, rows, bm, act_, d, store_mask, P); break;
    }
  }
}
#else
void ConvDirect::Strip(const float*, const float*, const float*, float*, int64_t, int64_t) const {}
#endif

}  // namespace cpu
}  // namespace kaiwu
