// Sgemm: Eigen in general, plus a path for few rows of A (policy batches)
// that reads B in place. Eigen packs the whole of B on every call, which for
// a [8, 2048] x [2048, 256] product costs more than the multiplication.

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <utility>

#include "backends/cpu/cpu_kernels.h"

#include "backends/cpu/simd_f32.h"

namespace kaiwu {
namespace cpu {

namespace {
using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapC = Eigen::Map<RowMajor, Eigen::Unaligned, Eigen::OuterStride<>>;
using MapConst = Eigen::Map<const RowMajor, Eigen::Unaligned, Eigen::OuterStride<>>;

// One block of rows [r0, r1) and columns [c0, c1) of C.
void GemmBlock(bool ta, bool tb, int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t k,
               float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
               float* c, int64_t ldc) {
  int64_t rows = r1 - r0, cols = c1 - c0;
  MapC C(c + r0 * ldc + c0, rows, cols, Eigen::OuterStride<>(ldc));
  // op(A) rows r0..r1: A is [M,K] (lda) or, transposed, [K,M].
  auto run = [&](const auto& A, const auto& B) {
    if (beta == 0.f) {
      C.noalias() = alpha * (A * B);
    } else {
      if (beta != 1.f) C *= beta;
      C.noalias() += alpha * (A * B);
    }
  };
  if (!ta && !tb) {
    run(MapConst(a + r0 * lda, rows, k, Eigen::OuterStride<>(lda)),
        MapConst(b + c0, k, cols, Eigen::OuterStride<>(ldb)));
  } else if (!ta && tb) {
    run(MapConst(a + r0 * lda, rows, k, Eigen::OuterStride<>(lda)),
        MapConst(b + c0 * ldb, cols, k, Eigen::OuterStride<>(ldb)).transpose());
  } else if (ta && !tb) {
    run(MapConst(a + r0, k, rows, Eigen::OuterStride<>(lda)).transpose(),
        MapConst(b + c0, k, cols, Eigen::OuterStride<>(ldb)));
  } else {
    run(MapConst(a + r0, k, rows, Eigen::OuterStride<>(lda)).transpose(),
        MapConst(b + c0 * ldb, cols, k, Eigen::OuterStride<>(ldb)).transpose());
  }
}

#ifdef KAIWU_SIMD_F32
// {sum(a), sum(b), sum(c), sum(d)} of 8-lane vectors: hadd(a, b) =
// [a01 a23 b01 b23 | a45 a67 b45 b67], hadd(c, d) alike; the third hadd gives
// [a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7].
inline __m128 Sum4x8(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// SimdF32 plus what the skinny kernels need. kDotRows, kAxpyRows and
// kAxpyVecs size the register tiles: accumulators plus the vectors of B (and
// one of A) fill the register file (16 vectors for AVX2, 32 for AVX-512).
#if defined(__AVX512F__)
struct Simd : SimdF32 {
  static constexpr int kDotRows = 4;   // 4 x 4 accumulators
  // 8 x 3 accumulators: 8 rows of A make one pass over B (measured: 4 x 4
  // tiles, reading B twice, took up to 2x longer at 8 rows).
  static constexpr int kAxpyRows = 8;
  static constexpr int kAxpyVecs = 3;
  static V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static void StoreMasked(float* p, Mask m, V v) { _mm512_mask_storeu_ps(p, m, v); }
  /// {sum(a), sum(b), sum(c), sum(d)}: folds each vector to 8 lanes first.
  static __m128 Sum4(V a, V b, V c, V d) {
    return Sum4x8(Fold(a), Fold(b), Fold(c), Fold(d));
  }
  // The empty asm keeps v in a register: otherwise GCC folds the load of a
  // vector used by several FMAs into each of them, one load per FMA.
  static void KeepInRegister(V& v) { asm("" : "+v"(v)); }

 private:
  static __m256 Fold(V a) {
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
    return _mm256_add_ps(_mm512_castps512_ps256(a), hi);
  }
};
#else
struct Simd : SimdF32 {
  static constexpr int kDotRows = 3;   // 3 x 4 accumulators, 3 of A, 1 of B
  static constexpr int kAxpyRows = 4;  // 4 x 3 accumulators, 3 of B, 1 of A
  static constexpr int kAxpyVecs = 3;
  static V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static void StoreMasked(float* p, Mask m, V v) { _mm256_maskstore_ps(p, m, v); }
  /// {sum(a), sum(b), sum(c), sum(d)}.
  static __m128 Sum4(V a, V b, V c, V d) { return Sum4x8(a, b, c, d); }
  // See the AVX-512 version.
  static void KeepInRegister(V& v) { asm("" : "+x"(v)); }
};
#endif

constexpr int kL = Simd::kLanes;
// Dot tiles cover 4 columns of C (rows of B): one Sum4 each.
constexpr int kDotCols = 4;

// alpha * op(A) * op(B) + beta * C with op(A) = A, for the skinny kernels.
struct Problem {
  int64_t m, n, k;
  float alpha;
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  float beta;
  float* c;
  int64_t ldc;
};

// B^T (B stored [n, k]): C rows [i0, i0 + MR), columns [j0, j0 + nc) with
// 0 < nc <= 4, each one a dot product of an A row and a B row along k.
// Columns past nc repeat the last B row (computed, never stored).
template <int MR>
void DotTile(const Problem& p, int64_t i0, int64_t j0, int64_t nc) {
  const float* a[MR];
  const float* b[kDotCols];
  for (int r = 0; r < MR; ++r) a[r] = p.a + (i0 + r) * p.lda;
  for (int j = 0; j < kDotCols; ++j) b[j] = p.b + (j0 + std::min<int64_t>(j, nc - 1)) * p.ldb;
  Simd::V acc[MR][kDotCols];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < kDotCols; ++j) acc[r][j] = Simd::Zero();
  // One step of k: MR vectors of A, then the B vectors one at a time.
  auto step = [&](auto load) {
    Simd::V av[MR];
    for (int r = 0; r < MR; ++r) {
      av[r] = load(a[r]);
      Simd::KeepInRegister(av[r]);
    }
    for (int j = 0; j < kDotCols; ++j) {
      Simd::V bv = load(b[j]);
      Simd::KeepInRegister(bv);
      for (int r = 0; r < MR; ++r) acc[r][j] = Simd::Fmadd(av[r], bv, acc[r][j]);
    }
  };
  int64_t q = 0;
  for (; q + kL <= p.k; q += kL) step([q](const float* x) { return Simd::LoadU(x + q); });
  if (q < p.k) {  // the k tail: masked lanes read as zero on both sides
    const Simd::Mask mk = Simd::FirstN(p.k - q);
    step([q, mk](const float* x) { return Simd::LoadMasked(mk, x + q); });
  }
  const __m128 alpha = _mm_set1_ps(p.alpha), beta = _mm_set1_ps(p.beta);
  for (int r = 0; r < MR; ++r) {
    __m128 s = _mm_mul_ps(alpha, Simd::Sum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
    float* c = p.c + (i0 + r) * p.ldc + j0;
    if (nc == kDotCols) {
      if (p.beta != 0.f) s = _mm_add_ps(s, _mm_mul_ps(beta, _mm_loadu_ps(c)));
      _mm_storeu_ps(c, s);
    } else {
      alignas(16) float t[kDotCols];
      _mm_store_ps(t, s);
      for (int64_t j = 0; j < nc; ++j) c[j] = p.beta == 0.f ? t[j] : t[j] + p.beta * c[j];
    }
  }
}

// B (stored [k, n]): C rows [i0, i0 + MR), columns [j0, j0 + NV vectors),
// summing A[i][q] * B row q along k. With kTail the last vector holds
// `last` columns (masked), else every vector is full.
template <int MR, int NV, bool kTail>
void AxpyTile(const Problem& p, int64_t i0, int64_t j0, int64_t last) {
  auto load = [last](const float* x, int v) {
    return kTail && v == NV - 1 ? Simd::LoadMasked(Simd::FirstN(last), x + v * kL)
                                : Simd::LoadU(x + v * kL);
  };
  const float* a[MR];
  for (int r = 0; r < MR; ++r) a[r] = p.a + (i0 + r) * p.lda;
  Simd::V acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = Simd::Zero();
  const float* b = p.b + j0;
  for (int64_t q = 0; q < p.k; ++q, b += p.ldb) {
    Simd::V bv[NV];
    for (int v = 0; v < NV; ++v) {
      bv[v] = load(b, v);
      Simd::KeepInRegister(bv[v]);
    }
    for (int r = 0; r < MR; ++r) {
      const Simd::V av = Simd::Set1(a[r][q]);
      for (int v = 0; v < NV; ++v) acc[r][v] = Simd::Fmadd(av, bv[v], acc[r][v]);
    }
  }
  const Simd::V alpha = Simd::Set1(p.alpha), beta = Simd::Set1(p.beta);
  // Fully unrolled, so that acc stays in registers: indexed at run time it
  // would live on the stack, and GCC then stores it on every step of k in
  // front of the masked load (which it cannot tell apart from a read of acc).
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    float* c = p.c + (i0 + r) * p.ldc + j0;
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      Simd::V s = Simd::Mul(alpha, acc[r][v]);
      if (p.beta != 0.f) s = Simd::Fmadd(beta, load(c, v), s);
      if (kTail && v == NV - 1) {
        Simd::StoreMasked(c + v * kL, Simd::FirstN(last), s);
      } else {
        Simd::StoreU(c + v * kL, s);
      }
    }
  }
}

// Tiles by their number of rows, 2 and up (index MR - 2), and for AxpyTile
// tails their number of vectors (index NV - 1).
using DotFn = void (*)(const Problem&, int64_t, int64_t, int64_t);
using AxpyFn = void (*)(const Problem&, int64_t, int64_t, int64_t);

template <int... R>
constexpr std::array<DotFn, sizeof...(R)> DotTiles(std::integer_sequence<int, R...>) {
  return {&DotTile<R + 2>...};
}
template <int NV, bool kTail, int... R>
constexpr std::array<AxpyFn, sizeof...(R)> AxpyTiles(std::integer_sequence<int, R...>) {
  return {&AxpyTile<R + 2, NV, kTail>...};
}
template <int... V>
constexpr std::array<std::array<AxpyFn, Simd::kAxpyRows - 1>, sizeof...(V)> AxpyTailTiles(
    std::integer_sequence<int, V...>) {
  return {AxpyTiles<V + 1, true>(std::make_integer_sequence<int, Simd::kAxpyRows - 1>())...};
}

constexpr auto kDotTiles = DotTiles(std::make_integer_sequence<int, Simd::kDotRows - 1>());
constexpr auto kAxpyFull =
    AxpyTiles<Simd::kAxpyVecs, false>(std::make_integer_sequence<int, Simd::kAxpyRows - 1>());
constexpr auto kAxpyTail = AxpyTailTiles(std::make_integer_sequence<int, Simd::kAxpyVecs>());

// Rows in the next tile with `left` rows to go (>= 2) and tiles of 2 to `max`
// rows: never one row, which would leave a tile of one row at the end (a
// poor use of the B vectors it loads).
static_assert(Simd::kDotRows >= 3 && Simd::kAxpyRows >= 3, "TileRows needs max >= 3");
int64_t TileRows(int64_t left, int max) {
  return left == max + 1 ? 2 : std::min<int64_t>(max, left);
}

// Columns [c0, c1) of C, every row. Column tiles are the outer loop so that
// the B rows (or columns) of a tile stay in cache while every row of A
// passes over them.
void DotColumns(const Problem& p, int64_t c0, int64_t c1) {
  for (int64_t j = c0; j < c1; j += kDotCols) {
    const int64_t nc = std::min<int64_t>(kDotCols, c1 - j);
    for (int64_t i = 0, rows; i < p.m; i += rows) {
      rows = TileRows(p.m - i, Simd::kDotRows);
      kDotTiles[rows - 2](p, i, j, nc);
    }
  }
}

void AxpyColumns(const Problem& p, int64_t c0, int64_t c1) {
  constexpr int64_t kCols = Simd::kAxpyVecs * kL;
  for (int64_t j = c0; j < c1; j += kCols) {
    const int64_t nc = std::min(kCols, c1 - j);
    const int64_t nv = (nc + kL - 1) / kL, last = nc - (nv - 1) * kL;
    for (int64_t i = 0, rows; i < p.m; i += rows) {
      rows = TileRows(p.m - i, Simd::kAxpyRows);
      if (nc == kCols) {
        kAxpyFull[rows - 2](p, i, j, kL);
      } else {
        kAxpyTail[nv - 1][rows - 2](p, i, j, last);
      }
    }
  }
}

// Rows of A for which the skinny kernels beat Eigen (measured single thread,
// B of 64x64 to 4096x512): A * B^T wins up to 48 rows on AVX2 and up to
// about 16 on AVX-512; A * B up to about 16 on both, except when B is far
// bigger than L2 (AVX-512, 12-16 rows: up to 15% slower). A single row is a
// matrix-vector product, which Eigen does without packing and streams B
// faster (measured).
constexpr int64_t kSkinnyMinRows = 2;
constexpr int64_t kSkinnyMaxRows = 16;

// C = alpha * A * op(B) + beta * C for few rows of A, columns split across
// the pool in blocks of whole tiles.
void SkinnyGemm(bool trans_b, const Problem& p, ThreadPool* pool) {
  struct Split {
    const Problem& p;
    void (*columns)(const Problem&, int64_t, int64_t);
    int64_t block;
  };
  const Split s{p, trans_b ? DotColumns : AxpyColumns,
                trans_b ? 4 * kDotCols : Simd::kAxpyVecs * kL};
  if (pool == nullptr || pool->num_threads() == 1) {
    s.columns(p, 0, p.n);
    return;
  }
  const double cost = 2.0 * static_cast<double>(p.m * p.k * s.block);
  pool->ParallelFor((p.n + s.block - 1) / s.block, cost, [&s](int64_t b0, int64_t b1) {
    s.columns(s.p, b0 * s.block, std::min(s.p.n, b1 * s.block));
  });
}
#endif  // KAIWU_SIMD_F32
}  // namespace

void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc, ThreadPool* pool) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
    return;
  }
#ifdef KAIWU_SIMD_F32
  if (!trans_a && m >= kSkinnyMinRows && m <= kSkinnyMaxRows) {
    SkinnyGemm(trans_b, Problem{m, n, k, alpha, a, lda, b, ldb, beta, c, ldc}, pool);
    return;
  }
#endif
  double cost = 2.0 * static_cast<double>(n) * static_cast<double>(k);
  if (pool == nullptr || pool->num_threads() == 1) {
    GemmBlock(trans_a, trans_b, 0, m, 0, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Split rows in blocks of 16 when there are enough; otherwise columns.
  if (m >= 16 * pool->num_threads()) {
    int64_t blocks = (m + 15) / 16;
    pool->ParallelFor(blocks, cost * 16, [&](int64_t b0, int64_t b1) {
      GemmBlock(trans_a, trans_b, b0 * 16, std::min(m, b1 * 16), 0, n, k, alpha, a, lda, b, ldb,
                beta, c, ldc);
    });
  } else {
    int64_t blocks = (n + 63) / 64;
    double col_cost = 2.0 * static_cast<double>(m) * static_cast<double>(k) * 64;
    pool->ParallelFor(blocks, col_cost, [&](int64_t b0, int64_t b1) {
      GemmBlock(trans_a, trans_b, 0, m, b0 * 64, std::min(n, b1 * 64), k, alpha, a, lda, b, ldb,
                beta, c, ldc);
    });
  }
}

}  // namespace cpu
}  // namespace kaiwu
