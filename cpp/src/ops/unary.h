// The unary family's meaning, shared by every backend: the checked attributes
// of the activations, IsInf, Clip and the Softmax family.
#pragma once

#include <cstdint>

#include "ops/op_context.h"

namespace kaiwu {

/// LeakyRelu Elu Selu Celu HardSigmoid ThresholdedRelu Gelu: attributes with
/// the ONNX defaults filled in (unused ones stay 0).
struct ActivationParams : OpParams {
  float alpha = 0.f, beta = 0.f, gamma = 0.f;
  bool gelu_tanh = false;  ///< Gelu with approximate="tanh"
};

/// IsInf's detect_positive / detect_negative.
struct IsInfParams : OpParams {
  bool detect_positive = true, detect_negative = true;
};

/// Clip: which bound inputs are present (opset >= 11), or the float bounds
/// carried as attributes (opset < 11).
struct ClipParams : OpParams {
  bool has_bound[2] = {false, false};  ///< inputs 1 (min) and 2 (max)
  bool attr_bounds = false;
  float attr_min = 0.f, attr_max = 0.f;
};

/// Softmax LogSoftmax Hardmax: the input as [outer, n, inner] around the axis
/// (opset < 13 flattens every dim from the axis on into n).
struct SoftmaxParams : OpParams {
  int64_t outer = 1, n = 1, inner = 1;
};

}  // namespace kaiwu
