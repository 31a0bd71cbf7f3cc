#include "backends/cpu/conv_gemm.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#define KAIWU_CONV_SIMD 1
#endif

namespace kaiwu {
namespace cpu {

bool ConvGemm::Supported(const SpatialGeometry& g, int64_t n, int64_t c, int64_t m) {
#ifdef KAIWU_CONV_SIMD
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

#ifdef KAIWU_CONV_SIMD
namespace {

// The vector operations the panel code needs, for one instruction set (the
// build targets one, so there is one definition). Masks select lanes: loads
// read zero and stores skip where they are off.
#if defined(__AVX512F__)
struct Simd {
  static constexpr int kLanes = 16;
  using V = __m512;
  using I = __m512i;
  using Mask = __mmask16;
  static V Zero() { return _mm512_setzero_ps(); }
  static V Set1(float f) { return _mm512_set1_ps(f); }
  static V Load(const float* p) { return _mm512_load_ps(p); }  // 64-byte aligned
  static void Store(float* p, V v) { _mm512_store_ps(p, v); }  // 64-byte aligned
  static V Fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static V Relu(V a) { return _mm512_max_ps(a, _mm512_setzero_ps()); }
  static I LoadI(const int32_t* p) { return _mm512_load_si512(p); }
  static I AddI(I a, int64_t b) { return _mm512_add_epi32(a, _mm512_set1_epi32(static_cast<int32_t>(b))); }
  /// Lanes [0, n).
  static Mask FirstN(int64_t n) { return static_cast<__mmask16>((uint32_t{1} << n) - 1); }
  /// m and 0 <= i < n (one unsigned compare).
  static Mask InRange(Mask m, I i, int64_t n) {
    return m & _mm512_cmplt_epu32_mask(i, _mm512_set1_epi32(static_cast<int32_t>(n)));
  }
  static V LoadMasked(Mask m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
  static V Gather(Mask m, I idx, const float* base) {
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, base, 4);
  }
  static void StoreMasked(float* p, Mask m, bool /*full*/, V v) { _mm512_mask_storeu_ps(p, m, v); }
  static void Scatter(float* base, Mask m, I idx, V v) { _mm512_mask_i32scatter_ps(base, m, idx, v, 4); }
  static void KeepInRegister(V&) {}
};
#else
// AVX2 masks are vectors with all bits set in the lanes that are on.
struct Simd {
  static constexpr int kLanes = 8;
  using V = __m256;
  using I = __m256i;
  using Mask = __m256i;
  static V Zero() { return _mm256_setzero_ps(); }
  static V Set1(float f) { return _mm256_set1_ps(f); }
  static V Load(const float* p) { return _mm256_load_ps(p); }  // 32-byte aligned
  static void Store(float* p, V v) { _mm256_store_ps(p, v); }  // 32-byte aligned
  static V Fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static V Relu(V a) { return _mm256_max_ps(a, _mm256_setzero_ps()); }
  static I LoadI(const int32_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
  static I AddI(I a, int64_t b) { return _mm256_add_epi32(a, _mm256_set1_epi32(static_cast<int32_t>(b))); }
  static Mask FirstN(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  /// m and 0 <= i < n: AVX2 has no unsigned compare, so two signed ones.
  static Mask InRange(Mask m, I i, int64_t n) {
    const __m256i below = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n)), i);
    const __m256i negative = _mm256_cmpgt_epi32(_mm256_setzero_si256(), i);
    return _mm256_andnot_si256(negative, _mm256_and_si256(m, below));
  }
  static V LoadMasked(Mask m, const float* p) { return _mm256_maskload_ps(p, m); }
  static V Gather(Mask m, I idx, const float* base) {
    return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), base, idx, _mm256_castsi256_ps(m), 4);
  }
  // Masked stores are slow (microcoded on AMD); only a panel's tail needs one.
  static void StoreMasked(float* p, Mask m, bool full, V v) {
    if (full) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, m, v);
  }
  // Left alone, GCC folds the panel loads into every FMA: 3x the loads, and
  // the tile becomes load bound. An empty asm pins each vector to a register.
  static void KeepInRegister(V& v) { asm("" : "+x"(v)); }
  // No scatter instruction: spill the lanes and store them one by one.
  static void Scatter(float* base, Mask m, I idx, V v) {
    alignas(32) float val[kLanes];
    alignas(32) int32_t off[kLanes];
    _mm256_store_ps(val, v);
    _mm256_store_si256(reinterpret_cast<__m256i*>(off), idx);
    const int on = _mm256_movemask_ps(_mm256_castsi256_ps(m));
    for (int l = 0; l < kLanes; ++l)
      if (on >> l & 1) base[off[l]] = val[l];
  }
};
#endif

constexpr int kL = Simd::kLanes;
constexpr int kNrV = ConvGemm::kNr / kL;  // vectors per panel
constexpr int kMr = static_cast<int>(ConvGemm::kMr);
static_assert(ConvGemm::kNr % kL == 0, "a panel is whole vectors");

// Per-panel column data: where each column's patch starts in x and where its
// outputs go in y (both relative to the group), plus vector masks.
struct PanelCols {
  alignas(64) int32_t xb[ConvGemm::kNr];
  alignas(64) int32_t yb[ConvGemm::kNr];
  alignas(64) int32_t i0[3][ConvGemm::kNr];
  Simd::Mask valid[kNrV];
  bool xcontig[kNrV], ycontig[kNrV], full[kNrV];
  int nv;
};

// C tile [kMr rows, NV vectors] = W rows [m0, m0 + rows) * packed panel, then
// bias, activation and the store into y.
template <int NV>
void Tile(int64_t K, const float* w, int64_t ldw, int rows, const float* b, const PanelCols& pc,
          const float* bias, const Activation& act, int64_t row_off, int64_t P, float* y) {
  // Rows past `rows` repeat the last one (computed, never stored).
  const float* a[kMr];
  for (int r = 0; r < kMr; ++r) a[r] = w + std::min(r, rows - 1) * ldw;
  Simd::V c[kMr][NV];
  for (int r = 0; r < kMr; ++r)
    for (int v = 0; v < NV; ++v) c[r][v] = Simd::Zero();
  for (int64_t k = 0; k < K; ++k) {
    Simd::V bv[NV];
    for (int v = 0; v < NV; ++v) {
      Simd::V t = Simd::Load(b + k * ConvGemm::kNr + kL * v);
      Simd::KeepInRegister(t);
      bv[v] = t;
    }
    for (int r = 0; r < kMr; ++r) {
      const Simd::V av = Simd::Set1(a[r][k]);
      for (int v = 0; v < NV; ++v) c[r][v] = Simd::Fmadd(av, bv[v], c[r][v]);
    }
  }
  const bool relu = act.kind == Activation::Kind::kRelu;
  const bool other = act.active() && !relu;
  for (int r = 0; r < rows; ++r) {
    const Simd::V bv = Simd::Set1(bias ? bias[r] : 0.f);
    alignas(64) float tmp[ConvGemm::kNr];
    for (int v = 0; v < NV; ++v) {
      c[r][v] = Simd::Add(c[r][v], bv);
      if (relu) c[r][v] = Simd::Relu(c[r][v]);
      if (other) Simd::Store(tmp + kL * v, c[r][v]);
    }
    if (other) {
      act.Apply(tmp, kL * NV);
      for (int v = 0; v < NV; ++v) c[r][v] = Simd::Load(tmp + kL * v);
    }
    const int64_t off = row_off + r * P;
    for (int v = 0; v < NV; ++v) {
      if (pc.ycontig[v]) {
        Simd::StoreMasked(y + pc.yb[kL * v] + off, pc.valid[v], pc.full[v], c[r][v]);
      } else {
        Simd::Scatter(y, pc.valid[v], Simd::AddI(Simd::LoadI(pc.yb + kL * v), off), c[r][v]);
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
  pc.nv = static_cast<int>((ncols + kL - 1) / kL);
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
    const int64_t n = std::clamp<int64_t>(ncols - kL * v, 0, kL);
    pc.valid[v] = Simd::FirstN(n);
    pc.full[v] = n == kL;
    bool xc = geo.stride[2] == 1, yc = true;
    for (int l = 1; l < n; ++l) {
      xc = xc && pc.xb[kL * v + l] == pc.xb[kL * v] + l;
      yc = yc && pc.yb[kL * v + l] == pc.yb[kL * v] + l;
    }
    pc.xcontig[v] = xc;
    pc.ycontig[v] = yc;
  }

  // Pack: row k = (channel, tap) of the implicit im2col matrix, kNr columns.
  const int64_t ks = geo.kernel_size();
  Simd::I xidx[kNrV], lo[3][kNrV];
  for (int v = 0; v < kNrV; ++v) {
    xidx[v] = Simd::LoadI(pc.xb + kL * v);
    for (int d = 0; d < 3; ++d) lo[d][v] = Simd::LoadI(pc.i0[d] + kL * v);
  }
  int64_t t = 0;
  for (int64_t kd = 0; kd < geo.kernel[0]; ++kd)
    for (int64_t kh = 0; kh < geo.kernel[1]; ++kh)
      for (int64_t kw = 0; kw < geo.kernel[2]; ++kw, ++t) {
        const int64_t tap[3] = {kd * geo.dilation[0], kh * geo.dilation[1], kw * geo.dilation[2]};
        Simd::Mask mask[kNrV];
        for (int v = 0; v < kNrV; ++v) {
          mask[v] = pc.valid[v];
          if (!all_valid_)
            for (int d = 0; d < 3; ++d)
              mask[v] = Simd::InRange(mask[v], Simd::AddI(lo[d][v], tap[d]), geo.in[d]);
        }
        const int64_t tap_off = tap[0] * HW + tap[1] * W + tap[2];
        for (int64_t cc = 0; cc < cg_; ++cc) {
          const int64_t off = cc * insz + tap_off;
          float* dst = buf + (cc * ks + t) * kNr;
          for (int v = 0; v < pc.nv; ++v) {
            Simd::V val;
            if (pc.xcontig[v]) {
              val = Simd::LoadMasked(mask[v], x + (pc.xb[kL * v] + off));
            } else {
              val = Simd::Gather(mask[v], Simd::AddI(xidx[v], off), x);
            }
            Simd::Store(dst + kL * v, val);
          }
        }
      }

  // Multiply: kMr output channels at a time against the whole panel.
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
