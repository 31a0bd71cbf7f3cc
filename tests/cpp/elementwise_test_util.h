// Helpers of the elementwise kernel tests: typed random tensors, element reads
// as double, random broadcastable shapes and the naive broadcast index.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernel_harness.h"

namespace kaiwu {
namespace testing {

/// Random values of dtype `dt` in [lo, hi) (ints: integers in that range;
/// bool: coin flips). With `nonzero`, zero is never drawn.
inline Tensor RandomOf(DType dt, Shape shape, std::mt19937& rng, double lo = -1, double hi = 1,
                       bool nonzero = false) {
  Tensor t(dt, std::move(shape));
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < t.size(); ++i) {
    double v = dist(rng);
    if (!IsFloat(dt)) v = std::floor(v);
    if (nonzero && v == 0) v = 1;
    switch (dt) {
      case DType::kFloat32: t.As<float>()[i] = static_cast<float>(v); break;
      case DType::kFloat64: t.As<double>()[i] = v; break;
      case DType::kInt8: t.As<int8_t>()[i] = static_cast<int8_t>(v); break;
      case DType::kUInt8: t.As<uint8_t>()[i] = static_cast<uint8_t>(v); break;
      case DType::kInt16: t.As<int16_t>()[i] = static_cast<int16_t>(v); break;
      case DType::kInt32: t.As<int32_t>()[i] = static_cast<int32_t>(v); break;
      case DType::kInt64: t.As<int64_t>()[i] = static_cast<int64_t>(v); break;
      case DType::kBool: t.As<bool>()[i] = (rng() & 1) != 0; break;
      default: ADD_FAILURE() << "RandomOf: bad dtype";
    }
  }
  return t;
}

/// Element i of any supported dtype, as double.
inline double At(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kFloat32: return t.As<float>()[i];
    case DType::kFloat64: return t.As<double>()[i];
    case DType::kInt8: return t.As<int8_t>()[i];
    case DType::kUInt8: return t.As<uint8_t>()[i];
    case DType::kInt16: return t.As<int16_t>()[i];
    case DType::kInt32: return t.As<int32_t>()[i];
    case DType::kInt64: return static_cast<double>(t.As<int64_t>()[i]);
    case DType::kBool: return t.As<bool>()[i] ? 1 : 0;
    default: ADD_FAILURE() << "At: bad dtype"; return 0;
  }
}

/// Flat index into `in` of output element `flat` under numpy broadcasting.
inline int64_t BroadcastIndex(const Shape& out, const Shape& in, int64_t flat) {
  int64_t idx = 0, stride = 1;
  int k = static_cast<int>(in.size()) - 1;
  for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d, --k) {
    int64_t c = flat % out[d];
    flat /= out[d];
    if (k >= 0) {
      if (in[k] != 1) idx += c * stride;
      stride *= in[k];
    }
  }
  return idx;
}

/// A random output shape and `n` input shapes that broadcast to it (leading
/// dims dropped and dims set to 1 at random).
inline std::vector<Shape> RandomBroadcastShapes(int n, std::mt19937& rng, Shape* out,
                                                int max_rank = 4, int max_dim = 5) {
  std::uniform_int_distribution<int> rank_dist(0, max_rank), dim_dist(1, max_dim);
  out->assign(rank_dist(rng), 1);
  for (auto& d : *out) d = dim_dist(rng);
  std::vector<Shape> shapes(n);
  for (int k = 0; k < n; ++k) {
    size_t drop = std::uniform_int_distribution<size_t>(0, out->size())(rng);
    if (k == 0) drop = 0;  // one input keeps the full rank
    for (size_t i = drop; i < out->size(); ++i)
      shapes[k].push_back((rng() % 3 == 0) ? 1 : (*out)[i]);
  }
  // The output is what the inputs broadcast to (dims may have become 1 everywhere).
  for (size_t i = 0; i < out->size(); ++i) {
    int64_t d = 1;
    for (const Shape& s : shapes) {
      size_t off = out->size() - s.size();
      if (i >= off && s[i - off] != 1) d = s[i - off];
    }
    (*out)[i] = d;
  }
  return shapes;
}

/// Fixed broadcast cases the fast paths care about: equal shapes, scalar,
/// row bias, per-channel, outer product, and large ones that go parallel.
inline std::vector<std::pair<Shape, Shape>> BroadcastCases() {
  return {{{4, 7}, {4, 7}},           {{4, 7}, {}},
          {{}, {3, 5}},               {{6, 9}, {9}},
          {{2, 3, 4, 5}, {3, 1, 1}},  {{5, 1}, {1, 6}},
          {{2, 1, 4}, {3, 1}},        {{}, {}},
          {{3, 0, 2}, {2}},           {{64, 40, 60}, {64, 40, 60}},
          {{160, 1024}, {1024}},      {{8, 16, 40, 40}, {1, 16, 1, 1}},
          {{150000}, {1}},            {{3, 2, 1, 2, 1, 2}, {2, 3, 1, 2, 1}}};
}

/// Runs the node at 1 and at 3 threads and requires bit-identical outputs
/// (an elementwise result does not depend on how the work is split); returns
/// the 1-thread output for the reference check.
inline Tensor RunBoth(const Node& node, const std::vector<Tensor>& inputs) {
  Tensor one = RunNode(node, inputs, 1)[0];
  Tensor three = RunNode(node, inputs, 3)[0];
  EXPECT_EQ(three.dtype(), one.dtype()) << node.op_type;
  EXPECT_EQ(three.shape(), one.shape()) << node.op_type;
  if (three.bytes() == one.bytes() && one.bytes() > 0)
    EXPECT_EQ(std::memcmp(one.data(), three.data(), one.bytes()), 0)
        << node.op_type << ": 3-thread result differs from 1-thread result";
  return one;
}

/// |got - want| <= tol * (1 + |want|), with NaN matching NaN and infinities exact.
inline bool Near(double got, double want, double tol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::abs(got - want) <= tol * (1 + std::abs(want));
}

}  // namespace testing
}  // namespace kaiwu
