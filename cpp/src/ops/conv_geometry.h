// Sliding-window geometry of Conv and the pools: strides, pads (explicit or
// auto_pad), dilations, ceil_mode and the output size. Computed by the op
// layer's shape inference (ops/conv.cc) and kept in the params that every
// backend's kernels read.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/op_context.h"

namespace kaiwu {

/// Geometry of up to 3 spatial dims, stored as (D, H, W): a 1-D op uses only
/// W and a 2-D op H and W; unused leading dims have size 1 and kernel 1.
struct SpatialGeometry {
  int nd = 0;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, kernel[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1}, dilation[3] = {1, 1, 1};
  int64_t pad_begin[3] = {0, 0, 0}, pad_end[3] = {0, 0, 0};
  std::vector<int64_t> valid_lo[3], valid_hi[3];  // per dim, per tap: see ValidRange

  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  int64_t kernel_size() const { return kernel[0] * kernel[1] * kernel[2]; }
  /// The nd output spatial dims.
  Shape OutShape() const;
  /// Output indices o of dim d (0..2) whose tap k reads inside the input:
  /// 0 <= o * stride - pad_begin + k * dilation < in, as [*lo, *hi).
  void ValidRange(int d, int64_t k, int64_t* lo, int64_t* hi) const {
    *lo = valid_lo[d][k];
    *hi = valid_hi[d][k];
  }
  /// True for a 1x1 kernel with stride 1 and no padding (a plain GEMM).
  bool IsPointwise() const;
};

/// Reads strides/pads/dilations/auto_pad (and ceil_mode when `allow_ceil`)
/// from the node for input spatial dims `in` and kernel dims `kernel`; fails
/// naming the node on malformed attributes or an empty output.
SpatialGeometry MakeGeometry(const OpContext& ctx, const Shape& in,
                             const std::vector<int64_t>& kernel, bool allow_ceil);

}  // namespace kaiwu
