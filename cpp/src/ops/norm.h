// The checked attributes of BatchNormalization, InstanceNormalization and
// LayerNormalization (shape inference in ops/norm.cc), which the kernels of
// every backend read.
#pragma once

#include <cstdint>

#include "ops/op_context.h"

namespace kaiwu {

/// BatchNormalization (inference) and InstanceNormalization.
struct NormParams : OpParams {
  float epsilon = 1e-5f;
};

/// LayerNormalization over the dims from `axis` on.
struct LayerNormParams : NormParams {
  int64_t axis = 0;  // non-negative
  Shape norm_shape;  // X.shape[axis:]
  /// Scale's and B's shapes without the leading 1s beyond norm_shape's rank:
  /// each broadcasts (right-aligned) to norm_shape. bias_shape only with B.
  Shape scale_shape, bias_shape;
  bool has_bias = false;
};

}  // namespace kaiwu
