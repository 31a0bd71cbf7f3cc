// The activation that the fuse_activation rewrite (passes/fuse_activation.cc)
// folds into Conv, Gemm and MatMul, as the node attributes "_kaiwu_act" and
// "_kaiwu_act_params" say: the producing kernel applies it to its output while
// it is hot. What each backend does with it lives in the backend
// (cpu::Activation::Apply, cuda::DeviceActivation).
#pragma once

#include "ir/graph.h"

namespace kaiwu {

struct FusedActivation {
  enum class Kind { kNone, kRelu, kLeakyRelu, kTanh, kSigmoid, kClip, kHardSigmoid, kHardSwish };
  Kind kind = Kind::kNone;
  /// LeakyRelu: alpha; Clip: [alpha, beta]; HardSigmoid: alpha * x + beta.
  float alpha = 0.f, beta = 0.f;

  /// Reads the "_kaiwu_act" / "_kaiwu_act_params" attributes the rewrite sets;
  /// kNone without them. Throws kInternal naming the node for an unknown name.
  static FusedActivation FromNode(const Node& node);
  bool active() const { return kind != Kind::kNone; }
};

}  // namespace kaiwu
