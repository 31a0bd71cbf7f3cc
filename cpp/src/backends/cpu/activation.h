// Activations that the fuse_activation rewrite folds into Conv, Gemm and
// MatMul: the producing kernel applies them to its output while it is hot.
#pragma once

#include <cstdint>

#include "ir/graph.h"

namespace kaiwu {
namespace cpu {

struct Activation {
  enum class Kind { kNone, kRelu, kLeakyRelu, kTanh, kSigmoid, kClip, kHardSigmoid, kHardSwish };
  Kind kind = Kind::kNone;
  float alpha = 0.f, beta = 0.f;

  /// Reads the "_kaiwu_act" / "_kaiwu_act_params" attributes the rewrite sets.
  static Activation FromNode(const Node& node);
  bool active() const { return kind != Kind::kNone; }
  /// x[i] = act(x[i] + bias) for i in [0, n).
  void Apply(float* x, int64_t n, float bias = 0.f) const;
};

}  // namespace cpu
}  // namespace kaiwu
