// Bulk conversions between float32 and the 16-bit floats (IEEE float16,
// bfloat16), bit for bit what core/half.h gives element by element: round to
// nearest even, overflow to infinity, NaN stays NaN (quiet). Used by the CPU
// Cast kernel, which the static weight program runs at load and at every
// refit of a half-precision session; the float16 ones use the CPU's F16C
// instructions when it has them (checked once at run time), the bfloat16 ones
// are integer loops the compiler vectorises.
#pragma once

#include <cstdint>

namespace kaiwu {

void FloatToHalfN(const float* x, uint16_t* y, int64_t n);
void HalfToFloatN(const uint16_t* x, float* y, int64_t n);
void FloatToBFloat16N(const float* x, uint16_t* y, int64_t n);
void BFloat16ToFloatN(const uint16_t* x, float* y, int64_t n);

/// Whether FloatToHalfN / HalfToFloatN use F16C on this CPU.
bool HalfConvertUsesF16C();

}  // namespace kaiwu
