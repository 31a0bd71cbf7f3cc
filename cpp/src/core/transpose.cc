#include "core/transpose.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KAIWU_TRANSPOSE_AVX2 1
#endif

namespace kaiwu {
namespace {

bool HasAvx2() {
#ifdef KAIWU_TRANSPOSE_AVX2
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
#else
  return false;
#endif
}

// out[r * cols + c] = src[c * ld + r] for 4-byte elements: 8 x 8 tiles
// transposed in AVX2 registers, the edges element by element.
#ifdef KAIWU_TRANSPOSE_AVX2
// With kCheck, `any` ORs in the lanes of the loaded values whose bits under
// `mask` are all set (Transpose32Check).
template <bool kCheck>
__attribute__((target("avx2"))) inline void Check8(__m256 a, __m256i mask, __m256i* any) {
  if (!kCheck) return;
  const __m256i v = _mm256_and_si256(_mm256_castps_si256(a), mask);
  *any = _mm256_or_si256(*any, _mm256_cmpeq_epi32(v, mask));
}

// One 8 x 8 tile: out rows [r, r + 8), columns [c, c + 8).
template <bool kCheck = false>
__attribute__((target("avx2"))) inline void Tile8x8(const float* src, int64_t ld, float* out,
                                                   int64_t cols, int64_t r, int64_t c,
                                                   __m256i mask = __m256i{}, __m256i* any = nullptr) {
  const float* s = src + c * ld + r;
  __m256 a0 = _mm256_loadu_ps(s), a1 = _mm256_loadu_ps(s + ld), a2 = _mm256_loadu_ps(s + 2 * ld),
         a3 = _mm256_loadu_ps(s + 3 * ld), a4 = _mm256_loadu_ps(s + 4 * ld),
         a5 = _mm256_loadu_ps(s + 5 * ld), a6 = _mm256_loadu_ps(s + 6 * ld),
         a7 = _mm256_loadu_ps(s + 7 * ld);
  if (kCheck) {
    Check8<kCheck>(a0, mask, any);
    Check8<kCheck>(a1, mask, any);
    Check8<kCheck>(a2, mask, any);
    Check8<kCheck>(a3, mask, any);
    Check8<kCheck>(a4, mask, any);
    Check8<kCheck>(a5, mask, any);
    Check8<kCheck>(a6, mask, any);
    Check8<kCheck>(a7, mask, any);
  }
  __m256 t0 = _mm256_unpacklo_ps(a0, a1), t1 = _mm256_unpackhi_ps(a0, a1),
         t2 = _mm256_unpacklo_ps(a2, a3), t3 = _mm256_unpackhi_ps(a2, a3),
         t4 = _mm256_unpacklo_ps(a4, a5), t5 = _mm256_unpackhi_ps(a4, a5),
         t6 = _mm256_unpacklo_ps(a6, a7), t7 = _mm256_unpackhi_ps(a6, a7);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
         u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
         u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
         u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  float* d = out + r * cols + c;
  _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(d + cols, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(d + 2 * cols, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(d + 3 * cols, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(d + 4 * cols, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(d + 5 * cols, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(d + 6 * cols, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(d + 7 * cols, _mm256_permute2f128_ps(u3, u7, 0x31));
}

// One 8 x 4 tile: out rows [r, r + 8), columns [c, c + 4) (the NCHW -> NHWC
// transpose of a 4-channel frame stack has only these).
template <bool kCheck = false>
__attribute__((target("avx2"))) inline void Tile8x4(const float* src, int64_t ld, float* out,
                                                   int64_t cols, int64_t r, int64_t c,
                                                   __m256i mask = __m256i{}, __m256i* any = nullptr) {
  const float* s = src + c * ld + r;
  __m256 a0 = _mm256_loadu_ps(s), a1 = _mm256_loadu_ps(s + ld), a2 = _mm256_loadu_ps(s + 2 * ld),
         a3 = _mm256_loadu_ps(s + 3 * ld);
  if (kCheck) {
    Check8<kCheck>(a0, mask, any);
    Check8<kCheck>(a1, mask, any);
    Check8<kCheck>(a2, mask, any);
    Check8<kCheck>(a3, mask, any);
  }
  __m256 t0 = _mm256_unpacklo_ps(a0, a1), t1 = _mm256_unpackhi_ps(a0, a1),
         t2 = _mm256_unpacklo_ps(a2, a3), t3 = _mm256_unpackhi_ps(a2, a3);
  // u_i: out row r + i in the low half, r + 4 + i in the high half.
  __m256 u[4] = {_mm256_shuffle_ps(t0, t2, 0x44), _mm256_shuffle_ps(t0, t2, 0xEE),
                 _mm256_shuffle_ps(t1, t3, 0x44), _mm256_shuffle_ps(t1, t3, 0xEE)};
  float* d = out + r * cols + c;
  for (int i = 0; i < 4; ++i) {
    _mm_storeu_ps(d + i * cols, _mm256_castps256_ps128(u[i]));
    _mm_storeu_ps(d + (i + 4) * cols, _mm256_extractf128_ps(u[i], 1));
  }
}

// With kCheck, returns whether any element read has every bit of `mask` set
// (checked as it is loaded); else false.
template <bool kCheck>
__attribute__((target("avx2"))) bool Transpose32Avx2T(const void* src_v, int64_t rows, int64_t cols,
                                                        int64_t ld, void* out_v, uint32_t mask_bits) {
  const float* src = static_cast<const float*>(src_v);
  float* out = static_cast<float*>(out_v);
  const __m256i mask = _mm256_set1_epi32(static_cast<int>(mask_bits));
  __m256i any = _mm256_setzero_si256();
  bool bad = false;
  auto edge = [&](int64_t r, int64_t c) {
    const float v = src[c * ld + r];
    out[r * cols + c] = v;
    if (kCheck) {
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof(bits));
      bad = bad || (bits & mask_bits) == mask_bits;
    }
  };
  const int64_t r8 = rows & ~int64_t{7}, r16 = rows & ~int64_t{15}, c8 = cols & ~int64_t{7};
  // 16 destination rows at a time, both tiles of a column block back to back:
  // each source cache line (16 floats) is used whole while it is in L1, even
  // when the source rows alias in the cache (ld a multiple of 1024).
  for (int64_t r = 0; r < r16; r += 16) {
    for (int64_t c = 0; c < c8; c += 8) {
      Tile8x8<kCheck>(src, ld, out, cols, r, c, mask, &any);
      Tile8x8<kCheck>(src, ld, out, cols, r + 8, c, mask, &any);
    }
  }
  for (int64_t r = r16; r < r8; r += 8)
    for (int64_t c = 0; c < c8; c += 8) Tile8x8<kCheck>(src, ld, out, cols, r, c, mask, &any);
  // Then a block of 4 columns where cols % 8 >= 4.
  const int64_t c4 = cols - c8 >= 4 ? c8 + 4 : c8;
  if (c4 > c8)
    for (int64_t r = 0; r < r8; r += 8) Tile8x4<kCheck>(src, ld, out, cols, r, c8, mask, &any);
  // Edges: the last rows % 8 rows of every column, the last cols % 4 columns.
  for (int64_t c = 0; c < c4; ++c)
    for (int64_t r = r8; r < rows; ++r) edge(r, c);
  for (int64_t c = c4; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r) edge(r, c);
  return kCheck && (bad || !_mm256_testz_si256(any, any));
}

void Transpose32Avx2(const void* src_v, int64_t rows, int64_t cols, int64_t ld, void* out_v) {
  Transpose32Avx2T<false>(src_v, rows, cols, ld, out_v, 0);
}
#else
void Transpose32Avx2(const void*, int64_t, int64_t, int64_t, void*) {}
template <bool kCheck> bool Transpose32Avx2T(const void*, int64_t, int64_t, int64_t, void*, uint32_t) {
  return false;
}
#endif

}  // namespace

bool Transpose32Check(const void* src_v, int64_t rows, int64_t cols, int64_t ld, void* out_v,
                      uint32_t mask) {
  if (HasAvx2()) return Transpose32Avx2T<true>(src_v, rows, cols, ld, out_v, mask);
  Transpose32(src_v, rows, cols, ld, out_v);
  const uint32_t* src = static_cast<const uint32_t*>(src_v);
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r)
      if ((src[c * ld + r] & mask) == mask) return true;
  return false;
}

void Transpose32(const void* src_v, int64_t rows, int64_t cols, int64_t ld, void* out_v) {
  if (HasAvx2()) {
    Transpose32Avx2(src_v, rows, cols, ld, out_v);
    return;
  }
  const uint32_t* src = static_cast<const uint32_t*>(src_v);
  uint32_t* out = static_cast<uint32_t*>(out_v);
  constexpr int64_t kTile = 32;
  for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
    const int64_t c1 = std::min(cols, c0 + kTile);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = c0; c < c1; ++c) out[r * cols + c] = src[r + c * ld];
  }
}

}  // namespace kaiwu
