// Float32 vector operations for the one instruction set the build targets:
// AVX-512F, else AVX2 + FMA (KAIWU_SIMD_F32 is then defined). Kernels extend
// SimdF32 with what only they need. Masks select lanes: masked loads read
// zero where they are off.
#pragma once

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>

#include <cstdint>

#define KAIWU_SIMD_F32 1

namespace kaiwu {
namespace cpu {

#if defined(__AVX512F__)
struct SimdF32 {
  static constexpr int kLanes = 16;
  using V = __m512;
  using Mask = __mmask16;
  static V Zero() { return _mm512_setzero_ps(); }
  static V Set1(float f) { return _mm512_set1_ps(f); }
  static V LoadU(const float* p) { return _mm512_loadu_ps(p); }
  static void StoreU(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V Fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V Max(V a, V b) { return _mm512_max_ps(a, b); }
  /// Lanes [0, n), 0 <= n <= kLanes.
  static Mask FirstN(int64_t n) { return static_cast<Mask>((uint32_t{1} << n) - 1); }
  static V LoadMasked(Mask m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
};
#else
// AVX2: masks are vectors with all bits set in the lanes that are on.
struct SimdF32 {
  static constexpr int kLanes = 8;
  using V = __m256;
  using Mask = __m256i;
  static V Zero() { return _mm256_setzero_ps(); }
  static V Set1(float f) { return _mm256_set1_ps(f); }
  static V LoadU(const float* p) { return _mm256_loadu_ps(p); }
  static void StoreU(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V Fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V Max(V a, V b) { return _mm256_max_ps(a, b); }
  /// Lanes [0, n), 0 <= n <= kLanes.
  static Mask FirstN(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V LoadMasked(Mask m, const float* p) { return _mm256_maskload_ps(p, m); }
};
#endif

}  // namespace cpu
}  // namespace kaiwu

#endif  // AVX-512F or AVX2 + FMA
