// Helpers for the shape and data-movement kernel tests: index arithmetic for
// naive references, tensor builders and exact comparisons (these ops move
// bytes, so results must match bit for bit).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernel_harness.h"

namespace kaiwu {
namespace testing {

inline std::vector<int64_t> Unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

inline int64_t Ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + idx[d];
  return flat;
}

inline std::vector<double> AsDouble(const Tensor& t) {
  std::vector<double> v(t.size());
  for (int64_t i = 0; i < t.size(); ++i) {
    switch (t.dtype()) {
      case DType::kFloat32: v[i] = t.As<float>()[i]; break;
      case DType::kFloat64: v[i] = t.As<double>()[i]; break;
      case DType::kInt64: v[i] = static_cast<double>(t.As<int64_t>()[i]); break;
      case DType::kInt32: v[i] = t.As<int32_t>()[i]; break;
      case DType::kInt16: v[i] = t.As<int16_t>()[i]; break;
      case DType::kUInt8: v[i] = t.As<uint8_t>()[i]; break;
      case DType::kBool: v[i] = t.As<bool>()[i]; break;
      default: ADD_FAILURE() << "unexpected dtype";
    }
  }
  return v;
}

/// Random data of `dtype`, never all zeros: floats in [-1, 1), ints in [-100, 100].
inline Tensor RandomOf(DType dtype, Shape shape, std::mt19937& rng) {
  if (dtype == DType::kFloat32) return RandomTensor(std::move(shape), rng);
  Tensor t(dtype, std::move(shape));
  std::uniform_int_distribution<int> dist(-100, 100);
  for (int64_t i = 0; i < t.size(); ++i) {
    int v = dist(rng);
    switch (dtype) {
      case DType::kFloat64: t.As<double>()[i] = v * 0.37; break;
      case DType::kInt64: t.As<int64_t>()[i] = v * 1000003LL; break;
      case DType::kInt32: t.As<int32_t>()[i] = v; break;
      case DType::kInt16: t.As<int16_t>()[i] = static_cast<int16_t>(v); break;
      case DType::kUInt8: t.As<uint8_t>()[i] = static_cast<uint8_t>(v + 100); break;
      case DType::kBool: t.As<bool>()[i] = v > 0; break;
      default: ADD_FAILURE() << "unexpected dtype";
    }
  }
  return t;
}

inline Tensor Ints(std::vector<int64_t> v) {
  return MakeTensor<int64_t>({static_cast<int64_t>(v.size())}, v);
}

inline Tensor BoolScalar(bool v) {
  Tensor t(DType::kBool, {});
  *t.As<bool>() = v;
  return t;
}

inline Shape RandomShape(std::mt19937& rng, int min_rank, int max_rank, int max_dim) {
  int rank = std::uniform_int_distribution<int>(min_rank, max_rank)(rng);
  Shape s(rank);
  for (auto& d : s) d = std::uniform_int_distribution<int>(1, max_dim)(rng);
  return s;
}

/// `got` has `shape`, and got[i] == want[i] exactly.
inline void ExpectTensor(const Tensor& got, const Shape& shape, const std::vector<double>& want,
                         const std::string& what) {
  ASSERT_EQ(ShapeToString(got.shape()), ShapeToString(shape)) << what;
  ASSERT_EQ(static_cast<size_t>(got.size()), want.size()) << what;
  std::vector<double> g = AsDouble(got);
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(g[i], want[i]) << what << " at flat index " << i;
}

/// Prepares the node's kernel only, returning the context (output shapes,
/// aliases, shape_only).
inline PrepareContext PrepareOnly(const Node& node, const std::vector<Tensor>& inputs) {
  PrepareContext ctx(node);
  ctx.inputs = InputInfos(inputs);
  InferOp(ctx);
  PrepareHostKernel(ctx);
  return ctx;
}

}  // namespace testing
}  // namespace kaiwu
