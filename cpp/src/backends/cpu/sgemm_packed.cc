#include "backends/cpu/sgemm_packed.h"

#include <algorithm>
#include <array>
#include <utility>

#include "backends/cpu/simd_f32.h"

namespace kaiwu {
namespace cpu {

void PackB(bool trans_b, int64_t k, int64_t n, const float* b, float* packed) {
  const int64_t panels = (n + kPackedPanel - 1) / kPackedPanel;
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t q = 0; q < k; ++q)
      for (int64_t j = 0; j < kPackedPanel; ++j) {
        const int64_t col = p * kPackedPanel + j;
        float v = 0.f;
        if (col < n) v = trans_b ? b[col * k + q] : b[q * n + col];
        packed[(p * k + q) * kPackedPanel + j] = v;
      }
}

namespace {

// Cache blocking: a panel's kKc rows of k (16 KB) stay in L1 while a block of
// kMc rows of A (kMc x kKc floats, up to 240 KB) stays in L2 across panels.
constexpr int64_t kKc = 256;
constexpr int64_t kMc = 240;

#ifdef KAIWU_SIMD_F32
#if defined(__AVX512F__)
struct Simd : SimdF32 {
  static constexpr int kRows = 12;    // 12 x 2 accumulators, 2 of B, 1 of A
  static constexpr int kPanels = 2;   // panels per tile (one vector each)
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static V Relu(V a) { return _mm512_max_ps(a, _mm512_setzero_ps()); }
  static void StoreMasked(float* p, Mask m, V v) { _mm512_mask_storeu_ps(p, m, v); }
  static void KeepInRegister(V& v) { asm("" : "+v"(v)); }
};
#else
struct Simd : SimdF32 {
  static constexpr int kRows = 6;     // 6 x 2 accumulators, 2 of B, 1 of A
  static constexpr int kPanels = 1;   // panels per tile (two vectors each)
  static V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static V Relu(V a) { return _mm256_max_ps(a, _mm256_setzero_ps()); }
  static void StoreMasked(float* p, Mask m, V v) { _mm256_maskstore_ps(p, m, v); }
  static void KeepInRegister(V& v) { asm("" : "+x"(v)); }
};
#endif

constexpr int kL = Simd::kLanes;
constexpr int kVp = static_cast<int>(kPackedPanel) / kL;  // vectors per panel
static_assert(kPackedPanel % kL == 0, "a panel is whole vectors");

struct Problem {
  int64_t m, n, k;
  const float* a;
  int64_t lda;
  const float* packed;
  const float* bias;
  const Activation* act;
  float* c;
  int64_t ldc;
};

// Rows [i0, i0 + MR) x panels [p0, p0 + NP) of C over k in [k0, k0 + kc):
// the first block of k starts from zero, later ones add to C; the last adds
// the bias, applies the activation and stores only columns below n.
template <int MR, int NP>
void Tile(const Problem& pr, int64_t i0, int64_t p0, int64_t k0, int64_t kc) {
  constexpr int NV = NP * kVp;
  const float* a[MR];
  for (int r = 0; r < MR; ++r) a[r] = pr.a + (i0 + r) * pr.lda + k0;
  const float* b = pr.packed + (p0 * pr.k + k0) * kPackedPanel;
  const int64_t pstride = pr.k * kPackedPanel;
  Simd::V acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = Simd::Zero();
  for (int64_t q = 0; q < kc; ++q, b += kPackedPanel) {
    Simd::V bv[NV];
    for (int pp = 0; pp < NP; ++pp)
      for (int v = 0; v < kVp; ++v) {
        bv[pp * kVp + v] = Simd::LoadU(b + pp * pstride + v * kL);
        Simd::KeepInRegister(bv[pp * kVp + v]);
      }
    for (int r = 0; r < MR; ++r) {
      const Simd::V av = Simd::Set1(a[r][q]);
      for (int v = 0; v < NV; ++v) acc[r][v] = Simd::Fmadd(av, bv[v], acc[r][v]);
    }
  }
  const bool first = k0 == 0, last = k0 + kc >= pr.k;
  const int64_t col0 = p0 * kPackedPanel;
  // Columns of vector v that exist (0 to kL).
  int64_t valid[NV];
  for (int v = 0; v < NV; ++v) valid[v] = std::clamp<int64_t>(pr.n - col0 - v * kL, 0, kL);
  Simd::V bias[NV];
  if (last) {
    for (int v = 0; v < NV; ++v) {
      const float* bp = pr.bias + col0 + v * kL;
      bias[v] = pr.bias == nullptr || valid[v] == 0 ? Simd::Zero()
                : valid[v] == kL                     ? Simd::LoadU(bp)
                                                     : Simd::LoadMasked(Simd::FirstN(valid[v]), bp);
    }
  }
  const bool relu = last && pr.act->kind == Activation::Kind::kRelu;
  const bool other = last && pr.act->active() && !relu;
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    float* c = pr.c + (i0 + r) * pr.ldc + col0;
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      if (valid[v] == 0) continue;
      const bool full = valid[v] == kL;
      Simd::V s = acc[r][v];
      if (!first) {
        s = Simd::Add(s, full ? Simd::LoadU(c + v * kL)
                              : Simd::LoadMasked(Simd::FirstN(valid[v]), c + v * kL));
      }
      if (last) s = Simd::Add(s, bias[v]);
      if (relu) s = Simd::Relu(s);
      if (full) {
        Simd::StoreU(c + v * kL, s);
      } else {
        Simd::StoreMasked(c + v * kL, Simd::FirstN(valid[v]), s);
      }
    }
    if (other) pr.act->Apply(c, std::min<int64_t>(NP * kPackedPanel, pr.n - col0));
  }
}

using TileFn = void (*)(const Problem&, int64_t, int64_t, int64_t, int64_t);

// Tiles by rows (index MR - 1) and panels (index log2(NP), NP = 1, 2, 4, 8).
constexpr int kNpLevels = 4;
template <int MR, int... L>
constexpr std::array<TileFn, kNpLevels> TilesOfRows(std::integer_sequence<int, L...>) {
  return {&Tile<MR, (1 << L)>...};
}
template <int... R>
constexpr std::array<std::array<TileFn, kNpLevels>, sizeof...(R)> AllTiles(
    std::integer_sequence<int, R...>) {
  return {TilesOfRows<R + 1>(std::make_integer_sequence<int, kNpLevels>())...};
}
constexpr auto kTiles = AllTiles(std::make_integer_sequence<int, Simd::kRows>());

// log2 of the panels a tile of `rows` rows takes at once: enough independent
// accumulators to hide the FMA latency (a row or two alone would wait on it)
// within the register file: accumulators, the B vectors and one of A.
constexpr int kRegs = kL == 16 ? 32 : 16;
int PanelLevel(int64_t rows) {
  const int max_level = kL == 16 ? 3 : 2;  // 8 vectors of B per step at most
  if (rows == 1) return max_level;          // B vectors are used once: no register each
  for (int l = max_level; l > 0; --l) {
    const int64_t nv = (int64_t{1} << l) * kVp;
    if (rows * nv + nv + 1 <= kRegs) return l;
  }
  return 0;
}

// Rows [r0, r1) x panels [q0, q1) with `rows`-row tiles, `level` panels at
// once (fewer at the end).
void Sweep(const Problem& pr, int64_t r0, int64_t r1, int64_t rows, int level, int64_t q0,
           int64_t q1, int64_t k0, int64_t kc) {
  for (int64_t p = q0; p < q1;) {
    int l = level;
    while ((int64_t{1} << l) > q1 - p) --l;
    for (int64_t i = r0; i < r1; i += rows) kTiles[rows - 1][l](pr, i, p, k0, kc);
    p += int64_t{1} << l;
  }
}

// Rows [r0, r1) x panels [q0, q1) of C, blocked for the caches: whole
// kRows-row tiles first, then the rows left over, with wider tiles.
void Block(const Problem& pr, int64_t r0, int64_t r1, int64_t q0, int64_t q1) {
  const int full_level = PanelLevel(Simd::kRows);
  for (int64_t k0 = 0; k0 < pr.k; k0 += kKc) {
    const int64_t kc = std::min(kKc, pr.k - k0);
    for (int64_t m0 = r0; m0 < r1; m0 += kMc) {
      const int64_t m1 = std::min(r1, m0 + kMc);
      const int64_t mf = m0 + (m1 - m0) / Simd::kRows * Simd::kRows;
      if (mf > m0) Sweep(pr, m0, mf, Simd::kRows, full_level, q0, q1, k0, kc);
      if (m1 > mf) Sweep(pr, mf, m1, m1 - mf, PanelLevel(m1 - mf), q0, q1, k0, kc);
    }
  }
}
#endif  // KAIWU_SIMD_F32

// Portable fallback (no AVX2 + FMA): the same blocking order per element.
void BlockScalar(int64_t m0, int64_t m1, int64_t q0, int64_t q1, int64_t n, int64_t k,
                 const float* a, int64_t lda, const float* packed, const float* bias,
                 const Activation& act, float* c, int64_t ldc) {
  for (int64_t i = m0; i < m1; ++i)
    for (int64_t p = q0; p < q1; ++p) {
      const int64_t cols = std::min(kPackedPanel, n - p * kPackedPanel);
      float* crow = c + i * ldc + p * kPackedPanel;
      for (int64_t j = 0; j < cols; ++j) {
        float s = 0.f;
        for (int64_t q = 0; q < k; ++q) s += a[i * lda + q] * packed[(p * k + q) * kPackedPanel + j];
        crow[j] = s + (bias ? bias[p * kPackedPanel + j] : 0.f);
      }
      if (act.active()) act.Apply(crow, cols);
    }
}

}  // namespace

namespace {
// What the parallel loops need, behind one reference (std::function holds
// that without allocating).
struct Job {
  int64_t m, n, k;
  const float* a;
  int64_t lda;
  const float* packed;
  const float* bias;
  const Activation& act;
  float* c;
  int64_t ldc;

  // Rows [r0, r1) x panels [q0, q1) of C.
  void Run(int64_t r0, int64_t r1, int64_t q0, int64_t q1) const {
    if (k == 0) {
      for (int64_t i = r0; i < r1; ++i) {
        float* crow = c + i * ldc;
        const int64_t j0 = q0 * kPackedPanel, j1 = std::min(n, q1 * kPackedPanel);
        for (int64_t j = j0; j < j1; ++j) crow[j] = bias ? bias[j] : 0.f;
        if (act.active()) act.Apply(crow + j0, j1 - j0);
      }
      return;
    }
#ifdef KAIWU_SIMD_F32
    Block(Problem{m, n, k, a, lda, packed, bias, &act, c, ldc}, r0, r1, q0, q1);
#else
    BlockScalar(r0, r1, q0, q1, n, k, a, lda, packed, bias, act, c, ldc);
#endif
  }
};
}  // namespace

void SgemmPackedB(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const float* packed, const float* bias, const Activation& act, float* c,
                  int64_t ldc, ThreadPool* pool) {
  if (m == 0 || n == 0) return;
  const int64_t panels = (n + kPackedPanel - 1) / kPackedPanel;
  const Job job{m, n, k, a, lda, packed, bias, act, c, ldc};
  const int64_t threads = pool ? pool->num_threads() : 1;
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * k;
  // Below ~64K flops a round trip to the pool costs more than it saves.
  constexpr double kMinParallelFlops = 65536.0;
  if (threads == 1 || flops < kMinParallelFlops) {
    job.Run(0, m, 0, panels);
    return;
  }
  // Column panels when there are enough for every thread (each thread then
  // reads only its part of B); otherwise row blocks of whole tiles.
#ifdef KAIWU_SIMD_F32
  constexpr int64_t kRowUnit = Simd::kRows;
#else
  constexpr int64_t kRowUnit = 1;
#endif
  if (panels >= 2 * threads || m < 2 * kRowUnit * threads) {
    pool->ParallelFor(panels, flops / panels,
                      [&job](int64_t q0, int64_t q1) { job.Run(0, job.m, q0, q1); });
  } else {
    const int64_t units = (m + kRowUnit - 1) / kRowUnit;
    pool->ParallelFor(units, flops / units, [&job](int64_t u0, int64_t u1) {
      job.Run(u0 * kRowUnit, std::min(job.m, u1 * kRowUnit), 0,
              (job.n + kPackedPanel - 1) / kPackedPanel);
    });
  }
}

}  // namespace cpu
}  // namespace kaiwu
