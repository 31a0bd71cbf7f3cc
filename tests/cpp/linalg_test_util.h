// Shared bits of the Linalg* kernel tests: comparisons against float64 references.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kaiwu/tensor.h"
#include "kernel_harness.h"

namespace kaiwu {
namespace testing {

inline std::vector<double> ToDouble(const Tensor& t) {
  std::vector<double> v(t.size());
  for (int64_t i = 0; i < t.size(); ++i) v[i] = t.As<float>()[i];
  return v;
}

/// Expects `got` (float32) to have `shape` and match `want` to a relative tolerance.
inline void ExpectNear(const Tensor& got, const Shape& shape, const std::vector<double>& want,
                       const std::string& what, double tol = 1e-4) {
  ASSERT_EQ(ShapeToString(got.shape()), ShapeToString(shape)) << what;
  ASSERT_EQ(static_cast<size_t>(got.size()), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got.As<float>()[i], want[i], tol * (1 + std::abs(want[i])))
        << what << " at flat index " << i;
}

/// Row-major index helpers for references.
inline int64_t Flat(const Shape& shape, const std::vector<int64_t>& idx) {
  int64_t f = 0;
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
  return f;
}

}  // namespace testing
}  // namespace kaiwu
