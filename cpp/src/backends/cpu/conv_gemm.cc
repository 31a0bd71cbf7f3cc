#include "backends/cpu/conv_gemm.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#if defined(__AVX512F__)
#include <immintrin.h>
#define KAIWU_CONV_AVX512 1
#endif

namespace kaiwu {
namespace cpu {

bool ConvGemm::Supported(const SpatialGeometry& g, int64_t n, int64_t c, int64_t m) {
#ifdef KAIWU_CONV_AVX512
  // Gather/scatter offsets are int32 (with headroom for pads and taps).
  constexpr int64_t kLimit = std::numeric_limits<int32_t>::max() / 2;
  return g.kernel_size() > 0 && g.out_size() > 0 && n * c * g.in_size() < kLimit &&
         n * m * g.out_size() < kLimit && c * g.kernel_size() < kLimit;
#else
  (void)g, (void)n, (void)c, (void)m;
  return false;
#endif
}

ConvGemm::ConvGemm(const SpatialGeometry& g, int64_t n, int64_t c, int64_t m, int64_t group,
                   const Activation& act)
    : geo_(g), act_(act), n_(n), c_(c), m_(m), group_(group) {
  cg_ = c / group;
  mg_ = m / group;
  k_ = cg_ * g.kernel_size();
  cols_ = n * g.out_size();
  panels_ = (cols_ + kNr - 1) / kNr;
  for (int d = 0; d < 3; ++d)
    for (int64_t t = 0; t < g.kernel[d]; ++t) {
      int64_t lo, hi;
      g.ValidRange(d, t, &lo, &hi);
      if (lo != 0 || hi != g.out[d]) all_valid_ = false;
    }
}

int64_t ConvGemm::Slots(int64_t threads) const {
  return std::max<int64_t>(1, std::min<int64_t>(threads, group_ * panels_));
}

void ConvGemm::Run(const float* x, const float* w, const float* bias, float* y, float* scratch,
                   int64_t max_slots, ThreadPool* pool) const {
  const int64_t tasks = group_ * panels_;
  const int64_t slots = std::min(max_slots, Slots(pool ? pool->num_threads() : 1));
  auto run = [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s)
      for (int64_t t = tasks * s / slots; t < tasks * (s + 1) / slots; ++t)
        Panel(x, w, bias, y, t / panels_, (t % panels_) * kNr, scratch + s * SlotFloats());
  };
  if (slots == 1) {
    run(0, 1);
    return;
  }
  const double cost = 2.0 * static_cast<double>(mg_ * k_ * kNr) * tasks / slots;
  pool->ParallelFor(slots, cost, run);
}

#ifdef KAIWU_CONV_AVX512
namespace {

constexpr int kNrV = ConvGemm::kNr / 16;

// Per-panel column data: where each column's patch starts in x and where its
// outputs go in y (both relative to the group), plus vector masks.
struct PanelCols {
  alignas(64) int32_t xb[ConvGemm::kNr];
  alignas(64) int32_t yb[ConvGemm::kNr];
  alignas(64) int32_t i0[3][ConvGemm::kNr];
  __mmask16 valid[kNrV];
  bool xcontig[kNrV], ycontig[kNrV];
  int nv;
};

// C tile [8 rows, NV vectors] = W rows [m0, m0 + rows) * packed panel, then
// bias, activation and the store into y.
template <int NV>
void Tile(int64_t K, const float* w, int64_t ldw, int rows, const float* b, const PanelCols& pc,
          const float* bias, const Activation& act, int64_t row_off, int64_t P, float* y) {
  const float* a0 = w;
  const float* a1 = w + std::min(1, rows - 1) * ldw;
  const float* a2 = w + std::min(2, rows - 1) * ldw;
  const float* a3 = w + std::min(3, rows - 1) * ldw;
  const float* a4 = w + std::min(4, rows - 1) * ldw;
  const float* a5 = w + std::min(5, rows - 1) * ldw;
  const float* a6 = w + std::min(6, rows - 1) * ldw;
  const float* a7 = w + std::min(7, rows - 1) * ldw;
  __m512 c[8][NV];
  for (int r = 0; r < 8; ++r)
    for (int v = 0; v < NV; ++v) c[r][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    __m512 bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_ps(b + k * ConvGemm::kNr + 16 * v);
#define KAIWU_ROW(R)                                                               \
  {                                                                                \
    const __m512 av = _mm512_set1_ps(a##R[k]);                                     \
    for (int v = 0; v < NV; ++v) c[R][v] = _mm512_fmadd_ps(av, bv[v], c[R][v]);   \
  }
    KAIWU_ROW(0) KAIWU_ROW(1) KAIWU_ROW(2) KAIWU_ROW(3)
    KAIWU_ROW(4) KAIWU_ROW(5) KAIWU_ROW(6) KAIWU_ROW(7)
#undef KAIWU_ROW
  }
  const bool relu = act.kind == Activation::Kind::kRelu;
  const bool other = act.active() && !relu;
  for (int r = 0; r < rows; ++r) {
    const __m512 bv = _mm512_set1_ps(bias ? bias[r] : 0.f);
    alignas(64) float tmp[ConvGemm::kNr];
    for (int v = 0; v < NV; ++v) {
      c[r][v] = _mm512_add_ps(c[r][v], bv);
      if (relu) c[r][v] = _mm512_max_ps(c[r][v], _mm512_setzero_ps());
      if (other) _mm512_store_ps(tmp + 16 * v, c[r][v]);
    }
    if (other) {
      act.Apply(tmp, 16 * NV);
      for (int v = 0; v < NV; ++v) c[r][v] = _mm512_load_ps(tmp + 16 * v);
    }
    const int64_t off = row_off + r * P;
    for (int v = 0; v < NV; ++v) {
      if (pc.ycontig[v]) {
        _mm512_mask_storeu_ps(y + pc.yb[16 * v] + off, pc.valid[v], c[r][v]);
      } else {
        const __m512i idx = _mm512_add_epi32(_mm512_load_si512(pc.yb + 16 * v),
                                             _mm512_set1_epi32(static_cast<int32_t>(off)));
        _mm512_mask_i32scatter_ps(y, pc.valid[v], idx, c[r][v], 4);
      }
    }
  }
}

}  // namespace

void ConvGemm::Panel(const float* x, const float* w, const float* bias, float* y, int64_t g,
                     int64_t j0, float* buf) const {
  const SpatialGeometry& geo = geo_;
  const int64_t P = geo.out_size(), OW = geo.out[2], OH = geo.out[1], OHW = OH * OW;
  const int64_t insz = geo.in_size(), W = geo.in[2], HW = geo.in[1] * W;
  const int64_t ncols = std::min(kNr, cols_ - j0);
  PanelCols pc;
  pc.nv = static_cast<int>((ncols + 15) / 16);
  // Decompose the first column once, then step (img, od, oh, ow) along.
  int64_t img = j0 / P, p = j0 % P;
  int64_t od = p / OHW, oh = (p / OW) % OH, ow = p % OW;
  for (int64_t jj = 0; jj < kNr; ++jj) {
    if (jj > 0 && j0 + jj < cols_) {
      ++p;
      if (++ow == OW) {
        ow = 0;
        if (++oh == OH) {
          oh = 0;
          if (++od == geo.out[0]) od = 0, p = 0, ++img;
        }
      }
    }
    const int64_t id = od * geo.stride[0] - geo.pad_begin[0];
    const int64_t ih = oh * geo.stride[1] - geo.pad_begin[1];
    const int64_t iw = ow * geo.stride[2] - geo.pad_begin[2];
    pc.xb[jj] = static_cast<int32_t>((img * c_ + g * cg_) * insz + id * HW + ih * W + iw);
    pc.yb[jj] = static_cast<int32_t>((img * m_ + g * mg_) * P + p);
    pc.i0[0][jj] = static_cast<int32_t>(id);
    pc.i0[1][jj] = static_cast<int32_t>(ih);
    pc.i0[2][jj] = static_cast<int32_t>(iw);
  }
  for (int v = 0; v < kNrV; ++v) {
    const int64_t n = std::clamp<int64_t>(ncols - 16 * v, 0, 16);
    pc.valid[v] = static_cast<__mmask16>((uint32_t{1} << n) - 1);
    bool xc = geo.stride[2] == 1, yc = true;
    for (int l = 1; l < n; ++l) {
      xc = xc && pc.xb[16 * v + l] == pc.xb[16 * v] + l;
      yc = yc && pc.yb[16 * v + l] == pc.yb[16 * v] + l;
    }
    pc.xcontig[v] = xc;
    pc.ycontig[v] = yc;
  }

  // Pack: row k = (channel, tap) of the implicit im2col matrix, kNr columns.
  const int64_t ks = geo.kernel_size();
  __m512i xidx[kNrV], lo[3][kNrV];
  for (int v = 0; v < kNrV; ++v) {
    xidx[v] = _mm512_load_si512(pc.xb + 16 * v);
    for (int d = 0; d < 3; ++d) lo[d][v] = _mm512_load_si512(pc.i0[d] + 16 * v);
  }
  int64_t t = 0;
  for (int64_t kd = 0; kd < geo.kernel[0]; ++kd)
    for (int64_t kh = 0; kh < geo.kernel[1]; ++kh)
      for (int64_t kw = 0; kw < geo.kernel[2]; ++kw, ++t) {
        const int64_t tap[3] = {kd * geo.dilation[0], kh * geo.dilation[1], kw * geo.dilation[2]};
        __mmask16 mask[kNrV];
        for (int v = 0; v < kNrV; ++v) {
          mask[v] = pc.valid[v];
          if (!all_valid_)
            for (int d = 0; d < 3; ++d) {
              const __m512i i = _mm512_add_epi32(lo[d][v], _mm512_set1_epi32(static_cast<int32_t>(tap[d])));
              mask[v] &= _mm512_cmplt_epu32_mask(i, _mm512_set1_epi32(static_cast<int32_t>(geo.in[d])));
            }
        }
        const int64_t tap_off = tap[0] * HW + tap[1] * W + tap[2];
        for (int64_t cc = 0; cc < cg_; ++cc) {
          const int64_t off = cc * insz + tap_off;
          float* dst = buf + (cc * ks + t) * kNr;
          for (int v = 0; v < pc.nv; ++v) {
            __m512 val;
            if (pc.xcontig[v]) {
              val = _mm512_maskz_loadu_ps(mask[v], x + (pc.xb[16 * v] + off));
            } else {
              const __m512i idx = _mm512_add_epi32(xidx[v], _mm512_set1_epi32(static_cast<int32_t>(off)));
              val = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask[v], idx, x, 4);
            }
            _mm512_store_ps(dst + 16 * v, val);
          }
        }
      }

  // Multiply: 8 output channels at a time against the whole panel.
  const float* wg = w + g * mg_ * k_;
  const float* bg = bias ? bias + g * mg_ : nullptr;
  for (int64_t m0 = 0; m0 < mg_; m0 += kMr) {
    const int rows = static_cast<int>(std::min(kMr, mg_ - m0));
    const float* bm = bg ? bg + m0 : nullptr;
    switch (pc.nv) {
      case 1: Tile<1>(k_, wg + m0 * k_, k_, rows, buf, pc, bm, act_, m0 * P, P, y); break;
      case 2: Tile<2>(k_, wg + m0 * k_, k_, rows, buf, pc, bm, act_, m0 * P, P, y); break;
      default: Tile<3>(k_, wg + m0 * k_, k_, rows, buf, pc, bm, act_, m0 * P, P, y); break;
    }
  }
}
#else
void ConvGemm::Panel(const float*, const float*, const float*, float*, int64_t, int64_t,
                     float*) const {}
#endif

}  // namespace cpu
}  // namespace kaiwu
