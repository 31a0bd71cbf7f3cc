// The x86 micro tiles of quant_gemm.h, each compiled for its own ISA through
// target attributes (the rest of the build may target any x86-64).
#include "backends/cpu/quant_gemm.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace kaiwu {
namespace cpu {
namespace {

inline int32_t Load4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// ---- AVX-512 VNNI: MR rows x NB blocks of 16 lanes, vpdpbusd (u8 x s8, 4 k per lane).
template <int MR, int NB, bool kLanesU8>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void TileVnni(
    int64_t kq, const uint8_t* bcast, int64_t ldb, const uint8_t* lanes, int64_t q_stride,
    int64_t blk_stride, int32_t* acc, const QSegs& seg) {
  __m512i c[MR][NB];
  for (int r = 0; r < MR; ++r)
    for (int b = 0; b < NB; ++b) c[r][b] = _mm512_setzero_si512();
  for (int64_t q0 = 0, s = 0; q0 < kq; q0 += seg.q, ++s) {
    const uint8_t* bs = bcast + s * seg.stride;
    for (int64_t q = q0, q1 = std::min(kq, q0 + seg.q); q < q1; ++q) {
      __m512i l[NB];
      for (int b = 0; b < NB; ++b) l[b] = _mm512_loadu_si512(lanes + b * blk_stride + q * q_stride);
      for (int r = 0; r < MR; ++r) {
        const __m512i a = _mm512_set1_epi32(Load4(bs + r * ldb + 4 * (q - q0)));
        for (int b = 0; b < NB; ++b)
          c[r][b] = kLanesU8 ? _mm512_dpbusd_epi32(c[r][b], l[b], a) : _mm512_dpbusd_epi32(c[r][b], a, l[b]);
      }
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int b = 0; b < NB; ++b) _mm512_storeu_si512(acc + r * kQTileLanes + b * 16, c[r][b]);
}

// ---- AVX2: both operands widen to int16 and vpmaddwd sums pairs into int32
// (exact); each lane keeps two partial sums until the end (TileAvx2x8).
template <bool kU8>
__attribute__((target("avx2"))) inline __m256i Widen16(__m128i v) {
  return kU8 ? _mm256_cvtepu8_epi16(v) : _mm256_cvtepi8_epi16(v);
}

// ---- AVX2 with vpmaddubsw: MR rows x 16 lanes. vpmaddubsw sums two u8 x s8
// products into int16, which saturates unless |w0| + |w1| <= 128 for every
// pair of consecutive int8 values (QPackWeights checks that at pack time);
// vpmaddwd with ones then sums the two pairs of a lane into int32.
template <int MR, bool kLanesU8>
__attribute__((target("avx2"))) void TileAvx2Ubs(int64_t kq, const uint8_t* bcast, int64_t ldb,
                                                 const uint8_t* lanes, int64_t q_stride, int32_t* acc,
                                                 const QSegs& seg) {
  __m256i c[MR][2];
  for (int r = 0; r < MR; ++r) c[r][0] = c[r][1] = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t q0 = 0, s = 0; q0 < kq; q0 += seg.q, ++s) {
    const uint8_t* bs = bcast + s * seg.stride;
    for (int64_t q = q0, q1 = std::min(kq, q0 + seg.q); q < q1; ++q) {
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lanes + q * q_stride));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lanes + q * q_stride + 32));
      for (int r = 0; r < MR; ++r) {
        const __m256i a = _mm256_set1_epi32(Load4(bs + r * ldb + 4 * (q - q0)));
        const __m256i p0 = kLanesU8 ? _mm256_maddubs_epi16(l0, a) : _mm256_maddubs_epi16(a, l0);
        const __m256i p1 = kLanesU8 ? _mm256_maddubs_epi16(l1, a) : _mm256_maddubs_epi16(a, l1);
        c[r][0] = _mm256_add_epi32(c[r][0], _mm256_madd_epi16(p0, ones));
        c[r][1] = _mm256_add_epi32(c[r][1], _mm256_madd_epi16(p1, ones));
      }
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + r * kQTileLanes), c[r][0]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + r * kQTileLanes + 8), c[r][1]);
  }
}

// MR rows x 16 lanes for QMicroTileShiftedAvx2: the activations (lanes when
// kLanesX, else the broadcast rows) are x - 128 as int8; vpmaddubsw takes
// |x - 128| as its unsigned operand and w * sign(x - 128) as its signed one.
template <int MR, bool kLanesX>
__attribute__((target("avx2"))) void TileAvx2Shifted(int64_t kq, const uint8_t* bcast, int64_t ldb,
                                                     const uint8_t* lanes, int64_t q_stride, int32_t* acc,
                                                     const QSegs& seg) {
  __m256i c[MR][2];
  for (int r = 0; r < MR; ++r) c[r][0] = c[r][1] = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t q0 = 0, s = 0; q0 < kq; q0 += seg.q, ++s) {
    const uint8_t* bs = bcast + s * seg.stride;
    for (int64_t q = q0, q1 = std::min(kq, q0 + seg.q); q < q1; ++q) {
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lanes + q * q_stride));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lanes + q * q_stride + 32));
      // kLanesX: the unsigned operands |x - 128| of the two lane registers.
      const __m256i u0 = kLanesX ? _mm256_abs_epi8(l0) : l0;
      const __m256i u1 = kLanesX ? _mm256_abs_epi8(l1) : l1;
      for (int r = 0; r < MR; ++r) {
        const __m256i b = _mm256_set1_epi32(Load4(bs + r * ldb + 4 * (q - q0)));
        __m256i p0, p1;
        if (kLanesX) {
          p0 = _mm256_maddubs_epi16(u0, _mm256_sign_epi8(b, l0));
          p1 = _mm256_maddubs_epi16(u1, _mm256_sign_epi8(b, l1));
        } else {
          const __m256i ub = _mm256_abs_epi8(b);
          p0 = _mm256_maddubs_epi16(ub, _mm256_sign_epi8(l0, b));
          p1 = _mm256_maddubs_epi16(ub, _mm256_sign_epi8(l1, b));
        }
        c[r][0] = _mm256_add_epi32(c[r][0], _mm256_madd_epi16(p0, ones));
        c[r][1] = _mm256_add_epi32(c[r][1], _mm256_madd_epi16(p1, ones));
      }
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + r * kQTileLanes), c[r][0]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + r * kQTileLanes + 8), c[r][1]);
  }
}

template <bool kLanesX>
void Avx2ShiftedRows(int mr, int64_t kq, const uint8_t* bcast, int64_t ldb, const uint8_t* lanes,
                     int64_t q_stride, int32_t* acc, const QSegs& seg) {
  int r = 0;
  for (; r + 4 <= mr; r += 4)
    TileAvx2Shifted<4, kLanesX>(kq, bcast + r * ldb, ldb, lanes, q_stride, acc + r * kQTileLanes, seg);
  if (mr - r == 2) {
    TileAvx2Shifted<2, kLanesX>(kq, bcast + r * ldb, ldb, lanes, q_stride, acc + r * kQTileLanes, seg);
  } else if (mr - r == 1) {
    TileAvx2Shifted<1, kLanesX>(kq, bcast + r * ldb, ldb, lanes, q_stride, acc + r * kQTileLanes, seg);
  } else if (mr - r == 3) {
    TileAvx2Shifted<3, kLanesX>(kq, bcast + r * ldb, ldb, lanes, q_stride, acc + r * kQTileLanes, seg);
  }
}

template <bool kLanesU8>
void Avx2UbsRows(int mr, int64_t kq, const uint8_t* bcast, int64_t ldb, const uint8_t* lanes,
                 int64_t q_stride, int32_t* acc, const QSegs& seg) {
  int r = 0;
  for (; r + 3 <= mr; r += 3) TileAvx2Ubs<3, kLanesU8>(kq, bcast + r * ldb, ldb, lanes, q_stride, acc + r * kQTileLanes, seg);
  if (mr - r == 2) TileAvx2Ubs<2, kLanesU8>(kq, bcast + r * ldb, ldb, lanes, q_stride, acc + r * kQTileLanes, seg);
  if (mr - r == 1) TileAvx2Ubs<1, kLanesU8>(kq, bcast + r * ldb, ldb, lanes, q_stride, acc + r * kQTileLanes, seg);
}

// MR rows x 8 lanes (one group of the 16-lane block at `lanes`), the lane
// bytes widened straight from memory.
template <int MR, bool kLanesU8>
__attribute__((target("avx2"))) void TileAvx2x8(int64_t kq, const uint8_t* bcast, int64_t ldb,
                                                const uint8_t* lanes, int64_t q_stride, int32_t* acc,
                                                const QSegs& seg) {
  __m256i c[MR][2];
  for (int r = 0; r < MR; ++r) c[r][0] = c[r][1] = _mm256_setzero_si256();
  for (int64_t q0 = 0, s = 0; q0 < kq; q0 += seg.q, ++s) {
    const uint8_t* bs = bcast + s * seg.stride;
    for (int64_t q = q0, q1 = std::min(kq, q0 + seg.q); q < q1; ++q) {
      const uint8_t* l = lanes + q * q_stride;
      const __m256i w0 = Widen16<kLanesU8>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(l)));
      const __m256i w1 = Widen16<kLanesU8>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(l + 16)));
      for (int r = 0; r < MR; ++r) {
        const __m128i four = _mm_cvtsi32_si128(Load4(bs + r * ldb + 4 * (q - q0)));
        const __m256i a = _mm256_broadcastq_epi64(kLanesU8 ? _mm_cvtepi8_epi16(four) : _mm_cvtepu8_epi16(four));
        c[r][0] = _mm256_add_epi32(c[r][0], _mm256_madd_epi16(w0, a));
        c[r][1] = _mm256_add_epi32(c[r][1], _mm256_madd_epi16(w1, a));
      }
    }
  }
  const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
  for (int r = 0; r < MR; ++r)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + r * kQTileLanes),
                        _mm256_permutevar8x32_epi32(_mm256_hadd_epi32(c[r][0], c[r][1]), order));
}

template <bool kLanesU8>
void Avx2Rows(int mr, int64_t kq, const uint8_t* bcast, int64_t ldb, const uint8_t* lanes,
              int64_t q_stride, int32_t* acc, const QSegs& seg) {
  for (int g = 0; g < 2; ++g) {
    const uint8_t* lg = lanes + 32 * g;
    int32_t* ag = acc + 8 * g;
    int r = 0;
    for (; r + 4 <= mr; r += 4) TileAvx2x8<4, kLanesU8>(kq, bcast + r * ldb, ldb, lg, q_stride, ag + r * kQTileLanes, seg);
    if (mr - r == 3) TileAvx2x8<3, kLanesU8>(kq, bcast + r * ldb, ldb, lg, q_stride, ag + r * kQTileLanes, seg);
    if (mr - r == 2) TileAvx2x8<2, kLanesU8>(kq, bcast + r * ldb, ldb, lg, q_stride, ag + r * kQTileLanes, seg);
    if (mr - r == 1) TileAvx2x8<1, kLanesU8>(kq, bcast + r * ldb, ldb, lg, q_stride, ag + r * kQTileLanes, seg);
  }
}

template <int NB, bool kLanesU8>
void VnniRows(int mr, int64_t kq, const uint8_t* bcast, int64_t ldb, const uint8_t* lanes,
              int64_t q_stride, int64_t blk_stride, int32_t* acc, const QSegs& seg) {
  switch (mr) {
    case 1: return TileVnni<1, NB, kLanesU8>(kq, bcast, ldb, lanes, q_stride, blk_stride, acc, seg);
    case 2: return TileVnni<2, NB, kLanesU8>(kq, bcast, ldb, lanes, q_stride, blk_stride, acc, seg);
    case 3: return TileVnni<3, NB, kLanesU8>(kq, bcast, ldb, lanes, q_stride, blk_stride, acc, seg);
    case 4: return TileVnni<4, NB, kLanesU8>(kq, bcast, ldb, lanes, q_stride, blk_stride, acc, seg);
    case 5: return TileVnni<5, NB, kLanesU8>(kq, bcast, ldb, lanes, q_stride, blk_stride, acc, seg);
    default: return TileVnni<6, NB, kLanesU8>(kq, bcast, ldb, lanes, q_stride, blk_stride, acc, seg);
  }
}

// ---- Row dots (QRowDots): 32 k (VNNI: 64) per step along one row of x and
// one channel's row of weights; the last kp % 32 bytes one at a time (AVX2) or
// through a masked load (VNNI).
__attribute__((target("avx2"))) inline int32_t HSum8(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// kMode 0: x uint8, full-range w (int16 widening); 1: x uint8, w within the
// pair bound (vpmaddubsw); 2: x - 128 as int8, w without -128 (|x| and sign).
template <int kMode>
__attribute__((target("avx2"))) int32_t DotAvx2(const uint8_t* x, const uint8_t* w, int64_t kp) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i s = _mm256_setzero_si256();
  int64_t k = 0;
  for (; k + 32 <= kp; k += 32) {
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + k));
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k));
    if (kMode == 0) {
      const __m256i x0 = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(xv));
      const __m256i x1 = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(xv, 1));
      const __m256i w0 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(wv));
      const __m256i w1 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(wv, 1));
      s = _mm256_add_epi32(s, _mm256_add_epi32(_mm256_madd_epi16(x0, w0), _mm256_madd_epi16(x1, w1)));
    } else {
      const __m256i p = kMode == 1 ? _mm256_maddubs_epi16(xv, wv)
                                   : _mm256_maddubs_epi16(_mm256_abs_epi8(xv), _mm256_sign_epi8(wv, xv));
      s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
    }
  }
  int32_t t = HSum8(s);
  const int8_t* ws = reinterpret_cast<const int8_t*>(w);
  for (; k < kp; ++k) t += (kMode == 2 ? int32_t(int8_t(x[k])) : int32_t(x[k])) * ws[k];
  return t;
}

template <int kMode>
void RowDotsAvx2(int rows, int nw, int64_t kp, const uint8_t* x, int64_t ldx, const uint8_t* w, int32_t* acc) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < nw; ++c) acc[r * nw + c] = DotAvx2<kMode>(x + r * ldx, w + c * kp, kp);
}

}  // namespace

void QRowDotsAvx2(bool shifted, bool pairs_fit_int16, int rows, int nw, int64_t kp, const uint8_t* x,
                  int64_t ldx, const uint8_t* w, int32_t* acc) {
  if (shifted) RowDotsAvx2<2>(rows, nw, kp, x, ldx, w, acc);
  else if (pairs_fit_int16) RowDotsAvx2<1>(rows, nw, kp, x, ldx, w, acc);
  else RowDotsAvx2<0>(rows, nw, kp, x, ldx, w, acc);
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) void QRowDotsVnni(
    int rows, int nw, int64_t kp, const uint8_t* x, int64_t ldx, const uint8_t* w, int32_t* acc) {
  const int64_t tail = kp % 64;
  const __mmask64 mask = tail ? (~0ULL >> (64 - tail)) : 0;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < nw; ++c) {
      const uint8_t *xr = x + r * ldx, *wc = w + c * kp;
      __m512i s = _mm512_setzero_si512();
      int64_t k = 0;
      for (; k + 64 <= kp; k += 64) s = _mm512_dpbusd_epi32(s, _mm512_loadu_si512(xr + k), _mm512_loadu_si512(wc + k));
      if (tail)
        s = _mm512_dpbusd_epi32(s, _mm512_maskz_loadu_epi8(mask, xr + k), _mm512_maskz_loadu_epi8(mask, wc + k));
      acc[r * nw + c] = _mm512_reduce_add_epi32(s);
    }
}

void QMicroTileAvx2(int mr, int nb, int64_t kq, const uint8_t* bcast, int64_t ldb,
                    const uint8_t* lanes, int64_t q_stride, int64_t blk_stride, bool lanes_u8,
                    int32_t* acc, bool pairs_fit_int16, const QSegs& seg) {
  for (int b = 0; b < nb; ++b) {
    if (pairs_fit_int16) {
      if (lanes_u8) Avx2UbsRows<true>(mr, kq, bcast, ldb, lanes + b * blk_stride, q_stride, acc + 16 * b, seg);
      else Avx2UbsRows<false>(mr, kq, bcast, ldb, lanes + b * blk_stride, q_stride, acc + 16 * b, seg);
      continue;
    }
    if (lanes_u8) Avx2Rows<true>(mr, kq, bcast, ldb, lanes + b * blk_stride, q_stride, acc + 16 * b, seg);
    else Avx2Rows<false>(mr, kq, bcast, ldb, lanes + b * blk_stride, q_stride, acc + 16 * b, seg);
  }
}

void QMicroTileShiftedAvx2(int mr, int nb, int64_t kq, const uint8_t* bcast, int64_t ldb,
                           const uint8_t* lanes, int64_t q_stride, int64_t blk_stride, bool lanes_x,
                           int32_t* acc, int64_t seg_q, int64_t seg_stride) {
  const QSegs seg(kq, seg_q, seg_stride);
  for (int b = 0; b < nb; ++b) {
    if (lanes_x) Avx2ShiftedRows<true>(mr, kq, bcast, ldb, lanes + b * blk_stride, q_stride, acc + 16 * b, seg);
    else Avx2ShiftedRows<false>(mr, kq, bcast, ldb, lanes + b * blk_stride, q_stride, acc + 16 * b, seg);
  }
}

namespace {

// The steps of QuantizeValue after the scaling on 8 lanes, the bytes stored.
struct Q8 {
  __m256 zp, lo, hi, big, nbig, magic;
};

__attribute__((target("avx2"))) inline void Quantize8(__m256 v, const Q8& c, bool is_signed, uint8_t* y) {
  v = _mm256_max_ps(v, c.nbig);  // NaN -> -2^22 (max returns its second operand)
  v = _mm256_min_ps(v, c.big);
  v = _mm256_sub_ps(_mm256_add_ps(v, c.magic), c.magic);  // round half to even
  v = _mm256_add_ps(v, c.zp);
  v = _mm256_min_ps(_mm256_max_ps(v, c.lo), c.hi);
  const __m256i q = _mm256_cvtps_epi32(v);  // integers in [lo, hi]: exact
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
  const __m128i b = is_signed ? _mm_packs_epi16(w, w) : _mm_packus_epi16(w, w);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(y), b);
}

__attribute__((target("avx2"))) Q8 MakeQ8(float zp, float lo, float hi) {
  return Q8{_mm256_set1_ps(zp),         _mm256_set1_ps(lo),          _mm256_set1_ps(hi),
            _mm256_set1_ps(4194304.f),  _mm256_set1_ps(-4194304.f),  _mm256_set1_ps(12582912.f)};
}

}  // namespace

__attribute__((target("avx2"))) void QuantizeRowsAvx2(const float* x, int64_t x_stride, int64_t rows, int64_t n,
                                                     float s, bool divide, float zp, float lo, float hi,
                                                     bool is_signed, uint8_t* y, int64_t y_stride) {
  const __m256 vs = _mm256_set1_ps(s);
  const Q8 c = MakeQ8(zp, lo, hi);
  for (int64_t r = 0; r < rows; ++r, x += x_stride, y += y_stride) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      Quantize8(divide ? _mm256_div_ps(v, vs) : _mm256_mul_ps(v, vs), c, is_signed, y + i);
    }
    for (; i < n; ++i) {
      float v = divide ? x[i] / s : x[i] * s;
      v = v > -4194304.f ? v : -4194304.f;
      v = v < 4194304.f ? v : 4194304.f;
      v = (v + 12582912.f) - 12582912.f;
      v += zp;
      v = v > lo ? v : lo;
      v = v < hi ? v : hi;
      const int32_t q = static_cast<int32_t>(v);
      y[i] = static_cast<uint8_t>(is_signed ? static_cast<uint8_t>(static_cast<int8_t>(q)) : q);
    }
  }
}

// QuantizeRowsAvx2 on 16 lanes: the same operations in the same order (so
// the same bytes), the row tail under a mask.
struct Q16 {
  __m512 s, zp, lo, hi, big, nbig, magic;
};

__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m128i Quantize16(__m512 v, const Q16& c, bool divide,
                                                                     bool is_signed) {
  v = divide ? _mm512_div_ps(v, c.s) : _mm512_mul_ps(v, c.s);
  v = _mm512_max_ps(v, c.nbig);  // NaN -> -2^22 (max returns its second operand)
  v = _mm512_min_ps(v, c.big);
  v = _mm512_sub_ps(_mm512_add_ps(v, c.magic), c.magic);  // round half to even
  v = _mm512_add_ps(v, c.zp);
  v = _mm512_min_ps(_mm512_max_ps(v, c.lo), c.hi);
  const __m512i q = _mm512_cvtps_epi32(v);  // integers in [lo, hi]: exact
  return is_signed ? _mm512_cvtsepi32_epi8(q) : _mm512_cvtusepi32_epi8(q);
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void QuantizeRowsAvx512(const float* x, int64_t x_stride, int64_t rows,
                                                                  int64_t n, float s, bool divide, float zp, float lo,
                                                                  float hi, bool is_signed, uint8_t* y,
                                                                  int64_t y_stride) {
  const Q16 c{_mm512_set1_ps(s),          _mm512_set1_ps(zp),          _mm512_set1_ps(lo),
              _mm512_set1_ps(hi),         _mm512_set1_ps(4194304.f),   _mm512_set1_ps(-4194304.f),
              _mm512_set1_ps(12582912.f)};
  for (int64_t r = 0; r < rows; ++r, x += x_stride, y += y_stride) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), Quantize16(_mm512_loadu_ps(x + i), c, divide, is_signed));
    if (i < n) {
      const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
      _mm_mask_storeu_epi8(y + i, m, Quantize16(_mm512_maskz_loadu_ps(m, x + i), c, divide, is_signed));
    }
  }
}

// QuantizeDividedBytes (quant_gemm.h): v = x * (1 / s), x / s where a lane of
// the vector lies within 2^-9 of a rounding tie (|v| < 4096), then the steps
// of QuantizeRows.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void QuantizeDividedAvx512(const float* x, int64_t n, float s,
                                                                                float zp, float lo, float hi,
                                                                                bool is_signed, uint8_t* y) {
  const __m512 vs = _mm512_set1_ps(s), inv = _mm512_set1_ps(1.f / s), one = _mm512_set1_ps(1.f);
  const __m512 magic = _mm512_set1_ps(12582912.f), tie = _mm512_set1_ps(0.5f - 1.f / 512.f),
               small = _mm512_set1_ps(4096.f);
  const Q16 c{one, _mm512_set1_ps(zp), _mm512_set1_ps(lo), _mm512_set1_ps(hi), _mm512_set1_ps(4194304.f),
              _mm512_set1_ps(-4194304.f), magic};
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
    __m512 v = _mm512_mul_ps(xv, inv);
    const __m512 r = _mm512_sub_ps(_mm512_add_ps(v, magic), magic);
    const __mmask16 risky = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, r)), tie, _CMP_GT_OQ) &
                            _mm512_cmp_ps_mask(_mm512_abs_ps(v), small, _CMP_LT_OQ);
    if (risky) v = _mm512_div_ps(xv, vs);
    _mm_mask_storeu_epi8(y + i, m, Quantize16(v, c, /*divide=*/false, is_signed));
  }
}

__attribute__((target("avx2"))) void QuantizeDividedAvx2(const float* x, int64_t n, float s, float zp, float lo,
                                                         float hi, bool is_signed, uint8_t* y) {
  const __m256 vs = _mm256_set1_ps(s), inv = _mm256_set1_ps(1.f / s);
  const __m256 magic = _mm256_set1_ps(12582912.f), tie = _mm256_set1_ps(0.5f - 1.f / 512.f),
               small = _mm256_set1_ps(4096.f), sign = _mm256_set1_ps(-0.f);
  const Q8 c = MakeQ8(zp, lo, hi);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 xv = _mm256_loadu_ps(x + i);
    __m256 v = _mm256_mul_ps(xv, inv);
    const __m256 r = _mm256_sub_ps(_mm256_add_ps(v, magic), magic);
    const __m256 d = _mm256_andnot_ps(sign, _mm256_sub_ps(v, r)), a = _mm256_andnot_ps(sign, v);
    const __m256 risky = _mm256_and_ps(_mm256_cmp_ps(d, tie, _CMP_GT_OQ), _mm256_cmp_ps(a, small, _CMP_LT_OQ));
    if (_mm256_movemask_ps(risky)) v = _mm256_div_ps(xv, vs);
    Quantize8(v, c, is_signed, y + i);
  }
  if (i < n) QuantizeRowsAvx2(x + i, n - i, 1, n - i, s, /*divide=*/true, zp, lo, hi, is_signed, y + i, n - i);
}

void QuantizeBytesAvx2(const float* x, int64_t n, float s, bool divide, float zp, float lo, float hi,
                       bool is_signed, uint8_t* y) {
  QuantizeRowsAvx2(x, n, 1, n, s, divide, zp, lo, hi, is_signed, y, n);
}

void QMicroTileVnni(int mr, int nb, int64_t kq, const uint8_t* bcast, int64_t ldb,
                    const uint8_t* lanes, int64_t q_stride, int64_t blk_stride, bool lanes_u8,
                    int32_t* acc, const QSegs& seg) {
  if (nb == 2) {
    if (lanes_u8) VnniRows<2, true>(mr, kq, bcast, ldb, lanes, q_stride, blk_stride, acc, seg);
    else VnniRows<2, false>(mr, kq, bcast, ldb, lanes, q_stride, blk_stride, acc, seg);
  } else {
    if (lanes_u8) VnniRows<1, true>(mr, kq, bcast, ldb, lanes, q_stride, blk_stride, acc, seg);
    else VnniRows<1, false>(mr, kq, bcast, ldb, lanes, q_stride, blk_stride, acc, seg);
  }
}

}  // namespace cpu
}  // namespace kaiwu
#endif
