// Helpers of the normalisation kernels.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <cstdint>

#include "backends/kernel.h"

namespace kaiwu {
namespace cpu {

void RegisterLayerNormKernel(KernelRegistry& r);  // norm_layer.cc

struct RowStats {
  float mean = 0.f;
  float inv_std = 0.f;  // 1 / sqrt(variance + epsilon)
};

/// Mean and inverse standard deviation of x[0, n) (two-pass, n > 0).
inline RowStats ComputeRowStats(const float* x, int64_t n, float epsilon) {
  Eigen::Map<const Eigen::ArrayXf> row(x, n);
  RowStats s;
  s.mean = row.sum() / static_cast<float>(n);
  float var = (row - s.mean).square().sum() / static_cast<float>(n);
  s.inv_std = 1.f / std::sqrt(var + epsilon);
  return s;
}

}  // namespace cpu
}  // namespace kaiwu
