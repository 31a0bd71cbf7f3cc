// BatchNormalization, LayerNormalization and InstanceNormalization against
// float64 references.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "linalg_test_util.h"

namespace kaiwu {
namespace {

using testing::ExpectNear;
using testing::FloatAttr;
using testing::IntAttr;
using testing::MakeNode;
using testing::RandomTensor;
using testing::RunNode;

TEST(LinalgNorm, BatchNormInference) {
  std::mt19937 rng(21);
  for (Shape xs : {Shape{2, 3}, Shape{3, 4, 5}, Shape{2, 3, 4, 5}, Shape{1, 2, 2, 3, 2}}) {
    int64_t c = xs[1];
    Tensor x = RandomTensor(xs, rng), scale = RandomTensor({c}, rng), b = RandomTensor({c}, rng);
    Tensor mean = RandomTensor({c}, rng), var = RandomTensor({c}, rng, 0.1f, 2.f);
    const float eps = 1e-3f;
    int64_t s = x.size() / (xs[0] * c);
    std::vector<double> want(x.size());
    for (int64_t i = 0; i < x.size(); ++i) {
      int64_t ch = (i / s) % c;
      want[i] = scale.As<float>()[ch] * (x.As<float>()[i] - double(mean.As<float>()[ch])) /
                    std::sqrt(double(var.As<float>()[ch]) + eps) +
                b.As<float>()[ch];
    }
    for (int threads : {1, 3}) {
      Tensor y = RunNode(MakeNode("BatchNormalization", 5, 1, {{"epsilon", FloatAttr(eps)}}),
                         {x, scale, b, mean, var}, threads)[0];
      ExpectNear(y, xs, want, "BatchNorm " + ShapeToString(xs));
    }
  }
}

TEST(LinalgNorm, BatchNormRejectsTraining) {
  std::mt19937 rng(22);
  std::vector<Tensor> ins = {RandomTensor({2, 3, 4}, rng), RandomTensor({3}, rng),
                             RandomTensor({3}, rng), RandomTensor({3}, rng),
                             RandomTensor({3}, rng, 0.1f, 1.f)};
  EXPECT_THROW(RunNode(MakeNode("BatchNormalization", 5, 1, {{"training_mode", IntAttr(1)}}), ins),
               Error);
  EXPECT_THROW(RunNode(MakeNode("BatchNormalization", 5, 3), ins), Error);
  ins[1] = RandomTensor({4}, rng);
  EXPECT_THROW(RunNode(MakeNode("BatchNormalization", 5, 1), ins), Error);
}

struct LnCase {
  Shape x;
  int64_t axis;
  Shape scale;
  bool bias;
};

TEST(LinalgNorm, LayerNormWithStats) {
  std::mt19937 rng(23);
  std::vector<LnCase> cases = {{{4, 16}, -1, {16}, true},      {{2, 3, 8}, -1, {8}, false},
                               {{2, 3, 8}, 1, {3, 8}, true},   {{2, 3, 8}, 1, {8}, true},
                               {{3, 5}, 0, {3, 5}, true},      {{2, 4, 3}, -2, {1, 3}, true},
                               {{64, 300}, -1, {300}, true}};
  for (const LnCase& c : cases) {
    const float eps = 1e-4f;
    Tensor x = RandomTensor(c.x, rng, -2.f, 3.f), scale = RandomTensor(c.scale, rng);
    int64_t axis = c.axis < 0 ? c.axis + c.x.size() : c.axis;
    Shape norm(c.x.begin() + axis, c.x.end());
    Tensor b = RandomTensor(c.scale, rng);
    int64_t inner = NumElements(norm), outer = x.size() / inner;
    std::vector<double> want(x.size()), want_mean(outer), want_inv(outer);
    auto bcast = [&](const Tensor& t, int64_t j) {  // t broadcast over norm, element j
      int64_t idx = 0, stride = 1, rem = j;
      for (int d = int(norm.size()) - 1; d >= 0; --d) {
        int64_t k = rem % norm[d];
        rem /= norm[d];
        int td = d - (int(norm.size()) - int(t.shape().size()));
        if (td < 0) continue;
        if (t.shape()[td] != 1) idx += k * stride;
        stride *= t.shape()[td];
      }
      return double(t.As<float>()[idx]);
    };
    for (int64_t r = 0; r < outer; ++r) {
      double mean = 0, var = 0;
      for (int64_t j = 0; j < inner; ++j) mean += x.As<float>()[r * inner + j];
      mean /= inner;
      for (int64_t j = 0; j < inner; ++j) var += std::pow(x.As<float>()[r * inner + j] - mean, 2);
      var /= inner;
      double inv = 1 / std::sqrt(var + eps);
      want_mean[r] = mean;
      want_inv[r] = inv;
      for (int64_t j = 0; j < inner; ++j)
        want[r * inner + j] = (x.As<float>()[r * inner + j] - mean) * inv * bcast(scale, j) +
                              (c.bias ? bcast(b, j) : 0.0);
    }
    Shape stat_shape(c.x.begin(), c.x.begin() + axis);
    stat_shape.resize(c.x.size(), 1);
    for (int threads : {1, 3}) {
      Node node = MakeNode("LayerNormalization", c.bias ? 3 : 2, 3,
                           {{"axis", IntAttr(c.axis)}, {"epsilon", FloatAttr(eps)}});
      std::vector<Tensor> ins = {x, scale};
      if (c.bias) ins.push_back(b);
      std::vector<Tensor> out = RunNode(node, ins, threads);
      std::string what = "LayerNorm " + ShapeToString(c.x) + " axis " + std::to_string(c.axis);
      ExpectNear(out[0], c.x, want, what);
      ExpectNear(out[1], stat_shape, want_mean, what + " mean");
      ExpectNear(out[2], stat_shape, want_inv, what + " inv_std");
      // Y only: the optional outputs omitted.
      Tensor y = RunNode(MakeNode("LayerNormalization", c.bias ? 3 : 2, 1,
                                  {{"axis", IntAttr(c.axis)}, {"epsilon", FloatAttr(eps)}}),
                         ins, threads)[0];
      ExpectNear(y, c.x, want, what + " (Y only)");
    }
  }
}

TEST(LinalgNorm, LayerNormRejectsBadInputs) {
  std::mt19937 rng(24);
  Tensor x = RandomTensor({2, 3, 4}, rng);
  EXPECT_THROW(RunNode(MakeNode("LayerNormalization", 2, 1, {{"axis", IntAttr(3)}}),
                       {x, RandomTensor({4}, rng)}),
               Error);
  EXPECT_THROW(RunNode(MakeNode("LayerNormalization", 2, 1), {x, RandomTensor({5}, rng)}), Error);
  EXPECT_THROW(RunNode(MakeNode("LayerNormalization", 2, 1),
                       {x, testing::MakeTensor<int32_t>({4}, {1, 1, 1, 1})}),
               Error);
}

TEST(LinalgNorm, InstanceNorm) {
  std::mt19937 rng(25);
  for (Shape xs : {Shape{2, 3, 7}, Shape{3, 2, 4, 5}}) {
    int64_t c = xs[1], s = NumElements(xs) / (xs[0] * c);
    Tensor x = RandomTensor(xs, rng, -1.f, 2.f), scale = RandomTensor({c}, rng),
           b = RandomTensor({c}, rng);
    const float eps = 1e-5f;
    std::vector<double> want(x.size());
    for (int64_t p = 0; p < xs[0] * c; ++p) {
      double mean = 0, var = 0;
      for (int64_t j = 0; j < s; ++j) mean += x.As<float>()[p * s + j];
      mean /= s;
      for (int64_t j = 0; j < s; ++j) var += std::pow(x.As<float>()[p * s + j] - mean, 2);
      var /= s;
      for (int64_t j = 0; j < s; ++j)
        want[p * s + j] = scale.As<float>()[p % c] * (x.As<float>()[p * s + j] - mean) /
                              std::sqrt(var + eps) +
                          b.As<float>()[p % c];
    }
    for (int threads : {1, 3})
      ExpectNear(RunNode(MakeNode("InstanceNormalization", 3, 1, {{"epsilon", FloatAttr(eps)}}),
                         {x, scale, b}, threads)[0],
                 xs, want, "InstanceNorm " + ShapeToString(xs));
  }
  std::mt19937 rng2(26);
  EXPECT_THROW(RunNode(MakeNode("InstanceNormalization", 3, 1),
                       {RandomTensor({2, 3, 4}, rng2), RandomTensor({2}, rng2),
                        RandomTensor({3}, rng2)}),
               Error);
}

}  // namespace
}  // namespace kaiwu
