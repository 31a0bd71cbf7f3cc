#include "core/stream_copy.h"

#include <cstring>

#include "core/transpose.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KAIWU_STREAM_X86 1
#endif

namespace kaiwu {

namespace {

#ifdef KAIWU_STREAM_X86
bool HasAvx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}

// The body of StreamCopy: `dst` 64-byte aligned, `bytes` a multiple of 64.
__attribute__((target("avx2"))) void StreamLinesAvx2(char* dst, const char* src, size_t bytes) {
  for (size_t i = 0; i < bytes; i += 64) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
  }
}

void StreamLinesSse2(char* dst, const char* src, size_t bytes) {
  for (size_t i = 0; i < bytes; i += 64) {
    const __m128i* s = reinterpret_cast<const __m128i*>(src + i);
    __m128i* d = reinterpret_cast<__m128i*>(dst + i);
    const __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1), c = _mm_loadu_si128(s + 2),
                  e = _mm_loadu_si128(s + 3);
    _mm_stream_si128(d, a);
    _mm_stream_si128(d + 1, b);
    _mm_stream_si128(d + 2, c);
    _mm_stream_si128(d + 3, e);
  }
}

// CopyCheckBits32: four vectors per step, their masked compares OR-ed together.
__attribute__((target("avx2"))) bool CopyCheckBits32Avx2(uint32_t* d, const uint32_t* s, int64_t n,
                                                          uint32_t mask) {
  const __m256i m = _mm256_set1_epi32(static_cast<int>(mask));
  auto hit = [&m](__m256i v) { return _mm256_cmpeq_epi32(_mm256_and_si256(v, m), m); };
  __m256i any = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 8));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 16));
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 24));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 8), b);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 16), c);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 24), e);
    any = _mm256_or_si256(any, _mm256_or_si256(_mm256_or_si256(hit(a), hit(b)),
                                               _mm256_or_si256(hit(c), hit(e))));
  }
  for (; i + 8 <= n; i += 8) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), a);
    any = _mm256_or_si256(any, hit(a));
  }
  bool bad = !_mm256_testz_si256(any, any);
  for (; i < n; ++i) {
    d[i] = s[i];
    bad = bad || (s[i] & mask) == mask;
  }
  return bad;
}

// Rows r..r+7 of out, columns c..c+7, as eight registers: the 8 x 8 tile of
// src (rows c..c+7 of length ld, elements r..r+7) transposed.
__attribute__((target("avx2"))) inline void Tile(const float* src, int64_t ld, int64_t r, int64_t c,
                                                 __m256 out[8]) {
  const float* s = src + c * ld + r;
  const __m256 a0 = _mm256_loadu_ps(s), a1 = _mm256_loadu_ps(s + ld),
               a2 = _mm256_loadu_ps(s + 2 * ld), a3 = _mm256_loadu_ps(s + 3 * ld),
               a4 = _mm256_loadu_ps(s + 4 * ld), a5 = _mm256_loadu_ps(s + 5 * ld),
               a6 = _mm256_loadu_ps(s + 6 * ld), a7 = _mm256_loadu_ps(s + 7 * ld);
  const __m256 t0 = _mm256_unpacklo_ps(a0, a1), t1 = _mm256_unpackhi_ps(a0, a1),
               t2 = _mm256_unpacklo_ps(a2, a3), t3 = _mm256_unpackhi_ps(a2, a3),
               t4 = _mm256_unpacklo_ps(a4, a5), t5 = _mm256_unpackhi_ps(a4, a5),
               t6 = _mm256_unpacklo_ps(a6, a7), t7 = _mm256_unpackhi_ps(a6, a7);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
               u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
               u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
               u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  out[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  out[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  out[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  out[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  out[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  out[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  out[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  out[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// Eight output rows from r, sixteen columns from c: each row one whole line.
__attribute__((target("avx2"))) inline void Lines8x16(const float* src, int64_t ld, float* out,
                                                      int64_t cols, int64_t r, int64_t c) {
  __m256 lo[8], hi[8];
  Tile(src, ld, r, c, lo);
  Tile(src, ld, r, c + 8, hi);
  for (int i = 0; i < 8; ++i) {
    float* d = out + (r + i) * cols + c;
    _mm256_stream_ps(d, lo[i]);
    _mm256_stream_ps(d + 8, hi[i]);
  }
}

__attribute__((target("avx2"))) void Transpose32StreamAvx2(const float* src, int64_t rows,
                                                            int64_t cols, int64_t ld, float* out) {
  const int64_t r8 = rows & ~int64_t{7}, r16 = rows & ~int64_t{15};
  // 16 output rows at a time: the source lines (16 floats from r) are used
  // whole while they are in L1.
  for (int64_t r = 0; r < r16; r += 16)
    for (int64_t c = 0; c < cols; c += 16) {
      Lines8x16(src, ld, out, cols, r, c);
      Lines8x16(src, ld, out, cols, r + 8, c);
    }
  for (int64_t r = r16; r < r8; r += 8)
    for (int64_t c = 0; c < cols; c += 16) Lines8x16(src, ld, out, cols, r, c);
  for (int64_t r = r8; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = src[c * ld + r];
}
#endif

}  // namespace

bool HasStreamingStores() {
#ifdef KAIWU_STREAM_X86
  return true;
#else
  return false;
#endif
}

void StreamCopy(void* dst_v, const void* src_v, size_t bytes) {
#ifdef KAIWU_STREAM_X86
  char* dst = static_cast<char*>(dst_v);
  const char* src = static_cast<const char*>(src_v);
  const size_t head = (64 - (reinterpret_cast<uintptr_t>(dst) & 63)) & 63;
  if (bytes < head + 64) {
    std::memcpy(dst, src, bytes);
    return;
  }
  std::memcpy(dst, src, head);
  const size_t body = (bytes - head) & ~size_t{63};
  if (HasAvx2()) StreamLinesAvx2(dst + head, src + head, body);
  else StreamLinesSse2(dst + head, src + head, body);
  std::memcpy(dst + head + body, src + head + body, bytes - head - body);
#else
  std::memcpy(dst_v, src_v, bytes);
#endif
}

void StreamFence() {
#ifdef KAIWU_STREAM_X86
  _mm_sfence();
#endif
}

bool CopyCheckBits32(void* dst, const void* src, int64_t n, uint32_t mask) {
  uint32_t* d = static_cast<uint32_t*>(dst);
  const uint32_t* s = static_cast<const uint32_t*>(src);
#ifdef KAIWU_STREAM_X86
  if (HasAvx2()) return CopyCheckBits32Avx2(d, s, n, mask);
#endif
  bool bad = false;
  for (int64_t i = 0; i < n; ++i) {
    d[i] = s[i];
    bad = bad || (s[i] & mask) == mask;
  }
  return bad;
}

void Transpose32Stream(const void* src, int64_t rows, int64_t cols, int64_t ld, void* out) {
#ifdef KAIWU_STREAM_X86
  if (HasAvx2() && cols % 16 == 0 && (reinterpret_cast<uintptr_t>(out) & 63) == 0) {
    Transpose32StreamAvx2(static_cast<const float*>(src), rows, cols, ld, static_cast<float*>(out));
    return;
  }
#endif
  Transpose32(src, rows, cols, ld, out);
}

}  // namespace kaiwu
