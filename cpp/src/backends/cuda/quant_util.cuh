// Device helpers of the int8 kernels (quant_linear.cu, quant_fused.cu).
#pragma once

#include <cuda_runtime.h>

namespace kaiwu {
namespace cuda {

/// saturate(round_half_even(v) + zp) into [lo, hi] as a float holding an
/// integer; NaN gives lo. The CPU kernels' QuantizeValue (cpu/quant_kernels.h).
__device__ inline float QuantizeValue(float v, float zp, float lo, float hi) {
  v = v > -4194304.f ? v : -4194304.f;  // beyond +-2^22 saturates anyway (NaN -> -2^22)
  v = v < 4194304.f ? v : 4194304.f;
  v = rintf(v) + zp;  // rintf: round half to even
  v = v > lo ? v : lo;
  return v < hi ? v : hi;
}

}  // namespace cuda
}  // namespace kaiwu
