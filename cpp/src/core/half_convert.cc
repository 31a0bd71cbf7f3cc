#include "core/half_convert.h"

#include <cstring>

#include "core/half.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KAIWU_HALF_X86 1
#endif

namespace kaiwu {
namespace {

#ifdef KAIWU_HALF_X86
// F16C's conversions are IEEE (round to nearest even with _MM_FROUND_TO_NEAREST_INT,
// subnormals kept, NaN quieted), the same results as core/half.h.
__attribute__((target("avx,f16c"))) void FloatToHalfF16C(const float* x, uint16_t* y,
                                                          int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
  for (; i < n; ++i) y[i] = FloatToHalf(x[i]);
}

__attribute__((target("avx,f16c"))) void HalfToFloatF16C(const uint16_t* x, float* y,
                                                          int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  for (; i < n; ++i) y[i] = HalfToFloat(x[i]);
}

bool DetectF16C() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
}
#endif

}  // namespace

bool HalfConvertUsesF16C() {
#ifdef KAIWU_HALF_X86
  static const bool has = DetectF16C();
  return has;
#else
  return false;
#endif
}

void FloatToHalfN(const float* x, uint16_t* y, int64_t n) {
#ifdef KAIWU_HALF_X86
  if (HalfConvertUsesF16C()) return FloatToHalfF16C(x, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = FloatToHalf(x[i]);
}

void HalfToFloatN(const uint16_t* x, float* y, int64_t n) {
#ifdef KAIWU_HALF_X86
  if (HalfConvertUsesF16C()) return HalfToFloatF16C(x, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = HalfToFloat(x[i]);
}

// Branch-free forms of FloatToBFloat16 / BFloat16ToFloat, so the loops vectorise.
void FloatToBFloat16N(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet = (u >> 16) | 0x40u;
    y[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
  }
}

void BFloat16ToFloatN(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(x[i]) << 16;
    std::memcpy(y + i, &u, 4);
  }
}

}  // namespace kaiwu
