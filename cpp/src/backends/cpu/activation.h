// The CPU side of the fused activations (ops/fused_activation.h): applied by
// Conv, Gemm and MatMul to their output while it is hot.
#pragma once

#include <cstdint>

#include "ops/fused_activation.h"

namespace kaiwu {
namespace cpu {

struct Activation : FusedActivation {
  Activation() = default;
  Activation(const FusedActivation& a) : FusedActivation(a) {}  // NOLINT: implicit by design

  /// x[i] = act(x[i] + bias) for i in [0, n).
  void Apply(float* x, int64_t n, float bias = 0.f) const;
};

}  // namespace cpu
}  // namespace kaiwu
