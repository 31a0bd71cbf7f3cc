#include "backends/cpu/conv_gemm.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "backends/cpu/simd_f32.h"

namespace kaiwu {
namespace cpu {
namespace {

#ifdef KAIWU_SIMD_F32
// Rearranged modes: about this many floats of x are rearranged at a time (at
// least one image), so that they are still in L1/L2 when the panels read
// them (measured: 16K floats beat 64K by ~5% at batch 32, whole batches by
// ~10%).
constexpr int64_t kChunkTarget = int64_t{1} << 14;
// kDirect when output rows fill at least this share of their vectors, else
// kSegments (measured: direct wins at 100%, segments at 83%; 87.5% is a tie).
constexpr int64_t kDirectMinPercent = 90;

int64_t CeilDiv(int64_t a, int64_t b) {  // b > 0
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

// SimdF32 plus the vector operations only the panel code needs. Masks select
// lanes: stores skip where they are off.
#if defined(__AVX512F__)
struct Simd : SimdF32 {
  static constexpr bool kRearrange = false;  // kGather only: not measured here yet
  using I = __m512i;
  static V Load(const float* p) { return _mm512_load_ps(p); }  // 64-byte aligned
  static void Store(float* p, V v) { _mm512_store_ps(p, v); }  // 64-byte aligned
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static V Relu(V a) { return _mm512_max_ps(a, _mm512_setzero_ps()); }
  static I LoadI(const int32_t* p) { return _mm512_load_si512(p); }
  static I AddI(I a, int64_t b) {
    return _mm512_add_epi32(a, _mm512_set1_epi32(static_cast<int32_t>(b)));
  }
  /// m and 0 <= i < n (one unsigned compare).
  static Mask InRange(Mask m, I i, int64_t n) {
    return m & _mm512_cmplt_epu32_mask(i, _mm512_set1_epi32(static_cast<int32_t>(n)));
  }
  /// m ? a : b, per lane.
  static V Select(Mask m, V a, V b) { return _mm512_mask_blend_ps(m, b, a); }
  static V Gather(Mask m, I idx, const float* base) {
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, base, 4);
  }
  /// `full`: m has every lane on.
  static void StoreMasked(float* p, Mask m, bool /*full*/, V v) {
    _mm512_mask_storeu_ps(p, m, v);
  }
  static void Scatter(float* base, Mask m, I idx, V v) {
    _mm512_mask_i32scatter_ps(base, m, idx, v, 4);
  }
  static void KeepInRegister(V&) {}
};
#else
struct Simd : SimdF32 {
  // Gathers are slow, and packing costs 20-50% of a conv here (a store per
  // vector against 4 rows of FMAs): use the rearranged modes where they fit.
  static constexpr bool kRearrange = true;
  using I = __m256i;
  static V Load(const float* p) { return _mm256_load_ps(p); }  // 32-byte aligned
  static void Store(float* p, V v) { _mm256_store_ps(p, v); }  // 32-byte aligned
  static V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static V Relu(V a) { return _mm256_max_ps(a, _mm256_setzero_ps()); }
  static I LoadI(const int32_t* p) {
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
  }
  static I AddI(I a, int64_t b) {
    return _mm256_add_epi32(a, _mm256_set1_epi32(static_cast<int32_t>(b)));
  }
  // No unsigned compare: two signed ones.
  static Mask InRange(Mask m, I i, int64_t n) {
    const __m256i below = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n)), i);
    const __m256i negative = _mm256_cmpgt_epi32(_mm256_setzero_si256(), i);
    return _mm256_andnot_si256(negative, _mm256_and_si256(m, below));
  }
  static V Select(Mask m, V a, V b) { return _mm256_blendv_ps(b, a, _mm256_castsi256_ps(m)); }
  static V Gather(Mask m, I idx, const float* base) {
    return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), base, idx, _mm256_castsi256_ps(m), 4);
  }
  // Masked stores are slow (microcoded on AMD); only a panel's tail needs one.
  static void StoreMasked(float* p, Mask m, bool full, V v) {
    if (full) {
      _mm256_storeu_ps(p, v);
    } else {
      _mm256_maskstore_ps(p, m, v);
    }
  }
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
  // Left alone, GCC folds the panel loads into every FMA: 4x the loads, and
  // the tile is load bound (measured 1.5x slower). An empty asm keeps each
  // panel vector in a register.
  static void KeepInRegister(V& v) { asm("" : "+x"(v)); }
};
#endif

constexpr int kL = Simd::kLanes;
constexpr int kNrV = ConvGemm::kNr / kL;  // vectors per panel
constexpr int kMr = static_cast<int>(ConvGemm::kMr);
static_assert(ConvGemm::kNr % kL == 0 && kNrV <= 3, "a panel is 1 to 3 vectors");

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

// Where the tile reads row k, vector v of the panel: a packed buffer...
struct PackedB {
  const float* b;
  Simd::V Load(int64_t k, int v) const { return Simd::Load(b + k * ConvGemm::kNr + kL * v); }
};

// ... or the rearranged x: vector v's columns start at p[v], row k koff[k]
// floats further.
struct DirectB {
  const float* p[kNrV];
  const int32_t* koff;
  Simd::V Load(int64_t k, int v) const { return Simd::LoadU(p[v] + koff[k]); }
};

// C tile [kMr rows, NV vectors] = W rows [m0, m0 + rows) * panel, then bias,
// activation and the store into y.
template <int NV, class B>
void Tile(int64_t K, const float* w, int64_t ldw, int rows, const B& b, const PanelCols& pc,
          const float* bias, const Activation& act, int64_t row_off, int64_t P, float* y) {
  // Rows past `rows` repeat the last one (computed, never stored).
  const float* a[kMr];
  for (int r = 0; r < kMr; ++r) a[r] = w + std::min(r, rows - 1) * ldw;
  // Ask for the output lines now, so that write misses (y is often far
  // larger than the caches at batch 32+) overlap the multiply instead of
  // stalling the stores (measured, batch 64: 10-20% on the layers with large
  // outputs, e.g. the IMPALA stem; no change when y is in cache).
  for (int r = 0; r < rows; ++r)
    for (int v = 0; v < NV; ++v)
      if (pc.ycontig[v]) __builtin_prefetch(y + pc.yb[kL * v] + row_off + r * P, 1, 3);
  Simd::V c[kMr][NV];
  for (int r = 0; r < kMr; ++r)
    for (int v = 0; v < NV; ++v) c[r][v] = Simd::Zero();
  for (int64_t k = 0; k < K; ++k) {
    Simd::V bv[NV];
    for (int v = 0; v < NV; ++v) {
      Simd::V t = b.Load(k, v);
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

// The mg output channels of a group (weights wg, biases bg), kMr at a time,
// against the panel.
template <class B>
void Multiply(int64_t K, const float* wg, int64_t mg, const B& b, const PanelCols& pc,
              const float* bg, const Activation& act, int64_t P, float* y) {
  for (int64_t m0 = 0; m0 < mg; m0 += kMr) {
    const int rows = static_cast<int>(std::min<int64_t>(kMr, mg - m0));
    const float* bm = bg ? bg + m0 : nullptr;
    switch (pc.nv) {
      case 1: Tile<1>(K, wg + m0 * K, K, rows, b, pc, bm, act, m0 * P, P, y); break;
      case 2: Tile<2>(K, wg + m0 * K, K, rows, b, pc, bm, act, m0 * P, P, y); break;
      default: Tile<3>(K, wg + m0 * K, K, rows, b, pc, bm, act, m0 * P, P, y); break;
    }
  }
}
#endif  // KAIWU_SIMD_F32

}  // namespace

bool ConvGemm::Supported(const SpatialGeometry& g, int64_t n, int64_t c, int64_t m) {
#ifdef KAIWU_SIMD_F32
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
  InitRearranged();
}

void ConvGemm::InitRearranged() {
#ifdef KAIWU_SIMD_F32
  const SpatialGeometry& g = geo_;
  // kDirect: a vector is kL columns of one output row, so rows that are not
  // whole vectors waste lanes. kSegments: a vector is kL consecutive columns
  // from at most two rows (OW >= kL - 1).
  const int64_t OW = g.out[2];
  vrow_ = (OW + kL - 1) / kL;
  const Mode mode =
      100 * OW >= kDirectMinPercent * kL * vrow_ ? Mode::kDirect : Mode::kSegments;
  if (!Simd::kRearrange || n_ == 0 || k_ == 0 || (mode == Mode::kSegments && OW < kL - 1))
    return;
  // Tap t of dim d reads input o * stride + t * dilation - pad: position
  // o + (t * dilation) / stride of the planes of phase (t * dilation) % stride,
  // where position e holds input e * stride + phase - pad (zero outside x).
  int64_t plane = 1;
  for (int d = 0; d < 3; ++d) {
    int64_t max_shift = 0;
    for (int64_t t = 0; t < g.kernel[d]; ++t) {
      const int64_t o = t * g.dilation[d];
      if (std::find(phases_[d].begin(), phases_[d].end(), o % g.stride[d]) == phases_[d].end())
        phases_[d].push_back(o % g.stride[d]);
      max_shift = std::max(max_shift, o / g.stride[d]);
    }
    ext_[d] = g.out[d] + max_shift;
    plane *= ext_[d];
  }
  cplane_ = plane * static_cast<int64_t>(phases_[0].size() * phases_[1].size() *
                                         phases_[2].size());
  // A chunk's last panel is partial: enough images that it is at most a
  // sixteenth of the chunk's panels.
  const int64_t per_image = mode == Mode::kDirect ? g.out[0] * g.out[1] * vrow_ : g.out_size();
  const int64_t per_panel = mode == Mode::kDirect ? kNrV : kNr;
  chunk_ = std::min(n_, std::max(kChunkTarget / (c_ * cplane_),
                                 CeilDiv(16 * per_panel, per_image)));
  if (chunk_ * c_ * cplane_ >= std::numeric_limits<int32_t>::max() / 2) return;
  for (int64_t cc = 0; cc < cg_; ++cc)
    for (int64_t kd = 0; kd < g.kernel[0]; ++kd)
      for (int64_t kh = 0; kh < g.kernel[1]; ++kh)
        for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
          const int64_t tap[3] = {kd, kh, kw};
          int64_t phase = 0, pos = 0;
          for (int d = 0; d < 3; ++d) {
            const int64_t o = tap[d] * g.dilation[d];
            const auto& ph = phases_[d];
            phase = phase * static_cast<int64_t>(ph.size()) +
                    (std::find(ph.begin(), ph.end(), o % g.stride[d]) - ph.begin());
            pos = pos * ext_[d] + o / g.stride[d];
          }
          koff_.push_back(static_cast<int32_t>(cc * cplane_ + phase * plane + pos));
        }
  if (mode == Mode::kDirect) {
    const int64_t OH = g.out[1], rows = g.out[0] * OH, P = g.out_size();
    row_vectors_.resize(chunk_ * rows * vrow_);
    for (int64_t u = 0; u < static_cast<int64_t>(row_vectors_.size()); ++u) {
      const int64_t img = u / (rows * vrow_), r = u / vrow_ % rows, ow = u % vrow_ * kL;
      row_vectors_[u].x = static_cast<int32_t>(img * c_ * cplane_ +
                                               (r / OH * ext_[1] + r % OH) * ext_[2] + ow);
      row_vectors_[u].y = static_cast<int32_t>(img * m_ * P + r * OW + ow);
      row_vectors_[u].n = static_cast<int32_t>(std::min<int64_t>(kL, OW - ow));
    }
  }
  mode_ = mode;
#endif
}

int64_t ConvGemm::Slots(int64_t threads) const {
  return std::max<int64_t>(1, std::min<int64_t>(threads, group_ * panels_));
}

int64_t ConvGemm::ChunkFloats() const {
  // Tail lanes read up to a vector past the last plane; whole 64-byte lines.
  return (chunk_ * c_ * cplane_ + 31) / 16 * 16;
}

int64_t ConvGemm::SlotFloats() const {
  switch (mode_) {
    case Mode::kGather: return k_ * kNr;
    case Mode::kDirect: return ChunkFloats();
    default: return ChunkFloats() + k_ * kNr;
  }
}

void ConvGemm::Run(const float* x, const float* w, const float* bias, float* y, float* scratch,
                   int64_t max_slots, ThreadPool* pool) const {
  const int64_t tasks = group_ * panels_;
  const int64_t slots = std::min(max_slots, Slots(pool ? pool->num_threads() : 1));
  if (mode_ != Mode::kGather) {
    RunRearranged(x, w, bias, y, scratch, slots, pool);
    return;
  }
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

#ifdef KAIWU_SIMD_F32
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

  Multiply(k_, w + g * mg_ * k_, mg_, PackedB{buf}, pc, bias ? bias + g * mg_ : nullptr, act_,
           P, y);
}

void ConvGemm::RunRearranged(const float* x, const float* w, const float* bias, float* y,
                             float* scratch, int64_t slots, ThreadPool* pool) const {
  // Images [i0, i1), a chunk at a time, in `slot`; with a pool, each chunk's
  // rearranging and panels are split across its threads.
  auto images = [&](int64_t i0, int64_t i1, float* slot, int64_t nslots, ThreadPool* p) {
    for (int64_t n0 = i0; n0 < i1; n0 += chunk_) {
      // The images of the next chunk (none after the last), for prefetching.
      const int64_t next = std::clamp<int64_t>(i1 - n0 - chunk_, 0, chunk_);
      RunChunk(x, w, bias, y, slot, nslots, n0, std::min(chunk_, i1 - n0), p,
               next ? x + (n0 + chunk_) * c_ * geo_.in_size() : nullptr,
               next * c_ * geo_.in_size());
    }
  };
  if (slots == 1 || n_ < 4 * slots) {
    images(0, n_, scratch, slots, slots == 1 ? nullptr : pool);
    return;
  }
  // Plenty of images: each thread takes its share, with no synchronisation
  // per chunk.
  const double cost = 2.0 * static_cast<double>(m_ * k_ * geo_.out_size()) * n_ / slots;
  pool->ParallelFor(slots, cost, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s)
      images(n_ * s / slots, n_ * (s + 1) / slots, scratch + s * SlotFloats(), 1, nullptr);
  });
}

void ConvGemm::RunChunk(const float* x, const float* w, const float* bias, float* y,
                        float* slot, int64_t slots, int64_t n0, int64_t nn, ThreadPool* pool,
                        const float* next_x, int64_t next_floats) const {
  // The chunk goes to the start of `slot`; kSegments packs in slot s's
  // buffer, after its chunk.
  float* xt = slot;
  std::fill(xt + nn * c_ * cplane_, xt + nn * c_ * cplane_ + kL, 0.f);
  auto fill = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      Rearrange(x + (n0 * c_ + i) * geo_.in_size(), xt + i * cplane_);
  };
  // kDirect panels are kNrV row vectors, kSegments panels kNr columns.
  const bool direct = mode_ == Mode::kDirect;
  const int64_t P = geo_.out_size();
  const int64_t units = direct ? nn * geo_.out[0] * geo_.out[1] * vrow_ : nn * P;
  const int64_t per_panel = direct ? kNrV : kNr, panels = (units + per_panel - 1) / per_panel;
  const int64_t tasks = group_ * panels;
  float* yc = y + n0 * m_ * P;
  const int64_t next_lines = (next_floats + 15) / 16;  // 64-byte lines
  auto run = [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s)
      for (int64_t t = tasks * s / slots; t < tasks * (s + 1) / slots; ++t) {
        // A share of the next chunk's x into L2 per panel, so that its
        // rearranging reads from cache rather than memory.
        for (int64_t l = next_lines * t / tasks; l < next_lines * (t + 1) / tasks; ++l)
          _mm_prefetch(reinterpret_cast<const char*>(next_x + 16 * l), _MM_HINT_T1);
        const int64_t g = t / panels, u0 = t % panels * per_panel;
        if (direct) {
          DirectPanel(xt, w, bias, yc, g, u0, units);
        } else {
          SegmentPanel(xt, w, bias, yc, g, u0, units, slot + s * SlotFloats() + ChunkFloats());
        }
      }
  };
  // Rearranging costs about a pass over x, less than a round trip to the
  // pool's threads for the chunks of one image.
  fill(0, nn * c_);
  if (pool == nullptr) {
    run(0, 1);
  } else {
    pool->ParallelFor(slots, 2.0 * static_cast<double>(mg_ * k_ * kNr) * tasks / slots, run);
  }
}

void ConvGemm::Rearrange(const float* x, float* xt) const {
  const SpatialGeometry& g = geo_;
  // Zero once, then copy the rows' inside parts: rows are short (10 floats
  // at 8x8), so per-row fill and copy calls would cost more than the copying.
  std::fill(xt, xt + cplane_, 0.f);
  for (int64_t pd : phases_[0])
    for (int64_t ph : phases_[1])
      for (int64_t pw : phases_[2]) {
        // Plane position e holds input e * stride + phase - pad, per dim;
        // along W, positions [lo, lo + n) are inside x.
        const int64_t off = pw - g.pad_begin[2], sw = g.stride[2], e2 = ext_[2];
        const int64_t lo = std::clamp<int64_t>(CeilDiv(-off, sw), 0, e2);
        const int64_t n = std::clamp<int64_t>(CeilDiv(g.in[2] - off, sw), lo, e2) - lo;
        for (int64_t e0 = 0; e0 < ext_[0]; ++e0) {
          const int64_t i0 = e0 * g.stride[0] + pd - g.pad_begin[0];
          for (int64_t e1 = 0; e1 < ext_[1]; ++e1, xt += e2) {
            const int64_t i1 = e1 * g.stride[1] + ph - g.pad_begin[1];
            if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1]) continue;
            const float* src = x + (i0 * g.in[1] + i1) * g.in[2] + lo * sw + off;
            float* dst = xt + lo;
            int64_t e = 0;
            if (sw == 1) {
              for (; e + kL <= n; e += kL) Simd::StoreU(dst + e, Simd::LoadU(src + e));
              for (; e < n; ++e) dst[e] = src[e];
              continue;
            }
            // Unrolled by hand: GCC's vectorized loop (with its alias
            // checks) is 1.5x slower on rows of 10-20.
            for (; e + 4 <= n; e += 4) {
              const float* s = src + e * sw;
              const float a0 = s[0], a1 = s[sw], a2 = s[2 * sw], a3 = s[3 * sw];
              dst[e] = a0;
              dst[e + 1] = a1;
              dst[e + 2] = a2;
              dst[e + 3] = a3;
            }
            for (; e < n; ++e) dst[e] = src[e * sw];
          }
        }
      }
}

void ConvGemm::DirectPanel(const float* xt, const float* w, const float* bias, float* y,
                           int64_t g, int64_t u0, int64_t vectors) const {
  const int64_t P = geo_.out_size();
  PanelCols pc;
  DirectB b;
  b.koff = koff_.data();
  pc.nv = static_cast<int>(std::min<int64_t>(kNrV, vectors - u0));
  const float* xg = xt + g * cg_ * cplane_;
  const int64_t yg = g * mg_ * P;
  for (int v = 0; v < pc.nv; ++v) {
    // Vector u0 + v: kL columns (n inside) of one output row.
    const RowVector& rv = row_vectors_[u0 + v];
    b.p[v] = xg + rv.x;
    pc.yb[kL * v] = static_cast<int32_t>(yg + rv.y);
    pc.valid[v] = Simd::FirstN(rv.n);
    pc.full[v] = rv.n == kL;
    pc.ycontig[v] = true;
  }
  Multiply(k_, w + g * mg_ * k_, mg_, b, pc, bias ? bias + g * mg_ : nullptr, act_, P, y);
}

void ConvGemm::SegmentPanel(const float* xt, const float* w, const float* bias, float* y,
                            int64_t g, int64_t j0, int64_t cols, float* buf) const {
  const int64_t P = geo_.out_size(), OW = geo_.out[2], OH = geo_.out[1];
  const int64_t rows = geo_.out[0] * OH, ncols = std::min(kNr, cols - j0);
  auto row_start = [&](int64_t img, int64_t r) {
    return xt + (img * c_ + g * cg_) * cplane_ + (r / OH * ext_[1] + r % OH) * ext_[2];
  };
  PanelCols pc;
  pc.nv = static_cast<int>((ncols + kL - 1) / kL);
  // Vector v: lanes [0, a) from row r from ow on, the rest from the start of
  // the next row (maybe the next image's first).
  const float* p1[kNrV];
  const float* p2[kNrV];
  Simd::Mask first[kNrV];
  for (int v = 0; v < pc.nv; ++v) {
    const int64_t j = j0 + kL * v, img = j / P, p = j % P, r = p / OW, ow = p % OW;
    const int64_t n = std::min<int64_t>(kL, ncols - kL * v), a = std::min(n, OW - ow);
    p1[v] = p2[v] = row_start(img, r) + ow;
    if (a < n) p2[v] = (r + 1 < rows ? row_start(img, r + 1) : row_start(img + 1, 0)) - a;
    first[v] = Simd::FirstN(a);
    pc.valid[v] = Simd::FirstN(n);
    pc.full[v] = n == kL;
    pc.ycontig[v] = a == n || r + 1 < rows;
    for (int l = 0; l < (pc.ycontig[v] ? 1 : kL); ++l) {
      const int64_t jl = j + std::min<int64_t>(l, n - 1);
      pc.yb[kL * v + l] = static_cast<int32_t>((jl / P * m_ + g * mg_) * P + jl % P);
    }
  }
  for (int64_t k = 0; k < k_; ++k) {
    const int32_t o = koff_[k];
    for (int v = 0; v < pc.nv; ++v)
      Simd::Store(buf + k * kNr + kL * v,
                  Simd::Select(first[v], Simd::LoadU(p1[v] + o), Simd::LoadU(p2[v] + o)));
  }
  Multiply(k_, w + g * mg_ * k_, mg_, PackedB{buf}, pc, bias ? bias + g * mg_ : nullptr, act_,
           P, y);
}
#else
void ConvGemm::Panel(const float*, const float*, const float*, float*, int64_t, int64_t,
                     float*) const {}
void ConvGemm::RunRearranged(const float*, const float*, const float*, float*, float*,
                             int64_t, ThreadPool*) const {}
#endif

}  // namespace cpu
}  // namespace kaiwu
