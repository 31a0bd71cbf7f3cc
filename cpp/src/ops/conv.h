// The checked attributes of Conv and the windowed pools (shape inference in
// ops/conv.cc), which the kernels of every backend read. GlobalMaxPool and
// GlobalAveragePool have none.
#pragma once

#include <cstdint>

#include "ops/conv_geometry.h"
#include "ops/fused_activation.h"
#include "ops/op_context.h"

namespace kaiwu {

/// Conv: Y = act(conv(X, W) + B), X [N, C, spatial...], W [M, C / group, kernel...].
struct ConvParams : OpParams {
  SpatialGeometry geo;
  int64_t group = 1;
  bool has_bias = false;  // input B is present
  FusedActivation act;
};

/// MaxPool and AveragePool.
struct PoolParams : OpParams {
  SpatialGeometry geo;
  bool indices = false;      // MaxPool: the node wants the Indices output
  bool col_major = false;    // MaxPool: storage_order 1 (Indices column-major)
  bool include_pad = false;  // AveragePool: count_include_pad
};

}  // namespace kaiwu
