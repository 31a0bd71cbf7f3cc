// The CPU quantization kernels: registration, and the integer helpers the
// reference kernels share (an int32-accumulating GEMM over zero-point-shifted
// operands and the requantize step of the QLinear ops).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "ops/quant.h"

namespace kaiwu {
namespace cpu {

void RegisterQuantKernels(KernelRegistry& r);        // quant_register.cc: all below
void RegisterQuantLinearKernels(KernelRegistry& r);  // quant_linear.cc: Q, DQ, DynamicQ
void RegisterQuantMatMulKernels(KernelRegistry& r);  // quant_matmul.cc: MatMulInteger, QLinearMatMul
void RegisterQuantConvKernels(KernelRegistry& r);    // quant_conv.cc: ConvInteger, QLinearConv
void RegisterQuantPackKernel(KernelRegistry& r);      // quant_pack.cc: QPackWeights
void RegisterQuantFusedKernels(KernelRegistry& r);   // quant_fused.cc: QLinearFused
void RegisterQuantLookupKernel(KernelRegistry& r);   // quant_lookup.cc: QLookup
void RegisterQuantAddKernel(KernelRegistry& r);      // quant_add.cc: QLinearAdd

enum class QIsa;
/// QLookup's loop: y[i] = table[x[i]] for i in [b, e), on the int8 path `isa`
/// (QGemmIsa(), capped by KAIWU_INT8_ISA): AVX-512 VBMI where the path is
/// AVX-512 and the CPU has VBMI, else AVX2 unless the path is scalar.
void LookupBytes(QIsa isa, const uint8_t* table, const uint8_t* x, uint8_t* y, int64_t b, int64_t e);

/// acc[i * n + j] = sum_p (a[i * lda + p] - a_zp[i]) * (b[p * ldb + j] - b_zp[j]),
/// int32 accumulation (exact for 8-bit operands and k < 2^15).
template <typename A, typename B>
void IntGemmRef(int64_t m, int64_t n, int64_t k, const A* a, int64_t lda, const int32_t* a_zp,
                const B* b, int64_t ldb, const int32_t* b_zp, int32_t* acc) {
  std::vector<int32_t> brow(n);
  for (int64_t i = 0; i < m; ++i) std::fill(acc + i * n, acc + (i + 1) * n, 0);
  for (int64_t p = 0; p < k; ++p) {
    for (int64_t j = 0; j < n; ++j) brow[j] = static_cast<int32_t>(b[p * ldb + j]) - b_zp[j];
    for (int64_t i = 0; i < m; ++i) {
      const int32_t av = static_cast<int32_t>(a[i * lda + p]) - a_zp[i];
      if (av == 0) continue;
      int32_t* row = acc + i * n;
      for (int64_t j = 0; j < n; ++j) row[j] += av * brow[j];
    }
  }
}

/// One requantized value: saturate(round_half_even(acc * multiplier) + zero_point).
template <typename Q>
inline Q Requantize(int32_t acc, float multiplier, int32_t zp) {
  float lo, hi;
  QuantRange(DTypeOf<Q>::value, &lo, &hi);
  float v = RoundHalfEven(static_cast<float>(acc) * multiplier) + static_cast<float>(zp);
  return static_cast<Q>(std::min(std::max(v, lo), hi));
}

/// saturate(round_half_even(v) + zp) into [lo, hi], as a float holding an
/// integer; NaN gives lo. Branch-free so that loops over it vectorize.
inline float QuantizeValue(float v, float zp, float lo, float hi) {
  v = v > -4194304.f ? v : -4194304.f;  // beyond +-2^22 saturates anyway (NaN -> -2^22)
  v = v < 4194304.f ? v : 4194304.f;
  v = (v + 12582912.f) - 12582912.f;  // round half to even for |v| <= 2^22
  v += zp;
  v = v > lo ? v : lo;
  return v < hi ? v : hi;
}

/// Reads element i (or element 0 when `per` is false) of a zero point of
/// dtype `dt` (int8/uint8; null: 0) as int32.
inline int32_t ZeroPoint(const void* zp, DType dt, bool per, int64_t i) {
  if (!zp) return 0;
  const int64_t j = per ? i : 0;
  return dt == DType::kInt8 ? static_cast<const int8_t*>(zp)[j] : static_cast<const uint8_t*>(zp)[j];
}

}  // namespace cpu
}  // namespace kaiwu
