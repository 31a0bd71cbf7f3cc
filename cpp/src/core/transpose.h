// Transposes of 4-byte elements (float32, int32): 8 x 8 tiles in AVX2
// registers where the CPU has AVX2 (cpuid, whatever the build targets), tiles
// in L1 otherwise. Shared by the CPU Transpose kernels and refit's copy blocks.
#pragma once

#include <cstdint>

namespace kaiwu {

/// out[r * cols + c] = src[r + c * ld] for r in [0, rows), c in [0, cols).
void Transpose32(const void* src, int64_t rows, int64_t cols, int64_t ld, void* out);

/// Transpose32 that also tells whether any element has every bit of `mask` set
/// (0x7f800000: a float32 NaN or Inf), checked as each element is loaded.
bool Transpose32Check(const void* src, int64_t rows, int64_t cols, int64_t ld, void* out,
                      uint32_t mask);

}  // namespace kaiwu
