// Softmax, LogSoftmax, Hardmax, ArgMax and ArgMin against naive float64 references.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernel_harness.h"

namespace kaiwu {
namespace {

using testing::IntAttr;
using testing::MakeNode;
using testing::MakeTensor;
using testing::RunNode;

// [outer, n, inner] view of a shape around `axis` (or, legacy, the trailing part).
void Split(const Shape& s, int64_t axis, bool legacy, int64_t* outer, int64_t* n, int64_t* inner) {
  *outer = *n = *inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d)
    (d < axis ? *outer : (d == axis || legacy) ? *n : *inner) *= s[d];
}

void CheckSoftmax(const std::string& op, const Shape& shape, int64_t axis, int opset, int threads,
                  std::mt19937& rng, bool ties = false) {
  Tensor x = testing::RandomTensor(shape, rng, -4.f, 4.f);
  if (ties)
    for (int64_t i = 0; i < x.size(); ++i) x.As<float>()[i] = float(rng() % 3);
  Node node = MakeNode(op, 1, 1, {{"axis", IntAttr(axis)}});
  node.opset = opset;
  auto out = RunNode(node, {x}, threads);
  ASSERT_EQ(out[0].shape(), shape);
  int64_t rank = shape.size(), outer, n, inner;
  Split(shape, axis < 0 ? axis + rank : axis, opset < 13, &outer, &n, &inner);
  const float* xp = x.As<float>();
  const float* yp = out[0].As<float>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      auto at = [&](int64_t i) { return (o * n + i) * inner + j; };
      double m = -INFINITY, s = 0;
      int64_t arg = 0;
      for (int64_t i = 0; i < n; ++i)
        if (xp[at(i)] > m) { m = xp[at(i)]; arg = i; }
      for (int64_t i = 0; i < n; ++i) s += std::exp(double(xp[at(i)]) - m);
      for (int64_t i = 0; i < n; ++i) {
        double want = op == "Softmax"    ? std::exp(xp[at(i)] - m) / s
                      : op == "Hardmax" ? double(i == arg)
                                        : xp[at(i)] - m - std::log(s);
        ASSERT_NEAR(yp[at(i)], want, 1e-5 * (1 + std::abs(want)))
            << op << " " << ShapeToString(shape) << " axis " << axis << " opset " << opset;
      }
    }
}

TEST(RnnReduceSoftmax, AllAxesMatchReference) {
  std::mt19937 rng(21);
  for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"})
    for (int threads : {1, 3}) {
      CheckSoftmax(op, {7}, 0, 13, threads, rng);
      CheckSoftmax(op, {3, 4, 5}, -1, 13, threads, rng);
      CheckSoftmax(op, {3, 4, 5}, 1, 13, threads, rng);
      CheckSoftmax(op, {3, 4, 5}, 0, 21, threads, rng);
      CheckSoftmax(op, {2, 5, 600}, 1, 21, threads, rng);  // several column chunks
      CheckSoftmax(op, {256, 200}, -1, 21, threads, rng);  // parallel rows
      CheckSoftmax(op, {3, 4, 5}, 1, 11, threads, rng);    // legacy 2-D coercion
      CheckSoftmax(op, {3, 4, 5}, 2, 11, threads, rng, true);
      CheckSoftmax(op, {6, 3, 5}, 1, 13, threads, rng, true);  // ties: Hardmax picks first
    }
}

TEST(RnnReduceSoftmax, LargeValuesAreStable) {
  Tensor x = MakeTensor<float>({1, 3}, {1000.f, 1001.f, 1002.f});
  auto out = RunNode(MakeNode("Softmax", 1, 1), {x});
  double s = 1 + std::exp(-1.0) + std::exp(-2.0);
  EXPECT_NEAR(out[0].As<float>()[2], 1 / s, 1e-6);
  out = RunNode(MakeNode("LogSoftmax", 1, 1), {x});
  EXPECT_NEAR(out[0].As<float>()[0], -2 - std::log(s), 1e-5);
}

TEST(RnnReduceSoftmax, BadInputsThrow) {
  std::mt19937 rng(22);
  Tensor x = testing::RandomTensor({2, 3}, rng);
  EXPECT_THROW(RunNode(MakeNode("Softmax", 1, 1, {{"axis", IntAttr(2)}}), {x}), Error);
  EXPECT_THROW(RunNode(MakeNode("LogSoftmax", 1, 1), {MakeTensor<int32_t>({2}, {1, 2})}), Error);
}

template <typename T>
void CheckArg(const std::string& op, const Shape& shape, int64_t axis, bool keepdims, bool last,
              int threads, std::mt19937& rng) {
  Tensor x(DTypeOf<T>::value, shape);
  for (int64_t i = 0; i < x.size(); ++i) x.As<T>()[i] = static_cast<T>(rng() % 4);  // many ties
  Node node = MakeNode(op, 1, 1, {{"axis", IntAttr(axis)}, {"keepdims", IntAttr(keepdims)},
                                  {"select_last_index", IntAttr(last)}});
  auto out = RunNode(node, {x}, threads);
  int64_t rank = shape.size(), a = axis < 0 ? axis + rank : axis, outer, n, inner;
  Split(shape, a, false, &outer, &n, &inner);
  Shape want_shape = shape;
  if (keepdims) want_shape[a] = 1; else want_shape.erase(want_shape.begin() + a);
  ASSERT_EQ(out[0].shape(), want_shape);
  ASSERT_EQ(out[0].dtype(), DType::kInt64);
  bool is_max = op == "ArgMax";
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      double best = is_max ? -INFINITY : INFINITY;
      int64_t arg = -1;
      for (int64_t i = 0; i < n; ++i) {
        double v = double(x.As<T>()[(o * n + i) * inner + j]);
        bool better = is_max ? (v > best || (last && v == best)) : (v < best || (last && v == best));
        if (better) { best = v; arg = i; }
      }
      ASSERT_EQ(out[0].As<int64_t>()[o * inner + j], arg)
          << op << " " << ShapeToString(shape) << " axis " << axis << " last " << last;
    }
}

TEST(RnnReduceArgMinMax, MatchesReference) {
  std::mt19937 rng(23);
  for (const char* op : {"ArgMax", "ArgMin"})
    for (int threads : {1, 3})
      for (int last : {0, 1}) {
        CheckArg<float>(op, {9}, 0, true, last, threads, rng);
        CheckArg<float>(op, {3, 4, 5}, 1, last, last, threads, rng);
        CheckArg<float>(op, {3, 4, 5}, -1, true, last, threads, rng);
        CheckArg<float>(op, {3, 4, 5}, 0, false, last, threads, rng);
        CheckArg<int32_t>(op, {4, 6}, 1, true, last, threads, rng);
        CheckArg<int64_t>(op, {5, 300, 3}, 0, false, last, threads, rng);
        CheckArg<float>(op, {50, 9, 400}, 1, false, last, threads, rng);
        CheckArg<float>(op, {400, 120}, 1, true, last, threads, rng);
      }
}

TEST(RnnReduceArgMinMax, BadInputsThrow) {
  std::mt19937 rng(24);
  Tensor x = testing::RandomTensor({2, 3}, rng);
  EXPECT_THROW(RunNode(MakeNode("ArgMax", 1, 1, {{"axis", IntAttr(-3)}}), {x}), Error);
  Tensor b(DType::kBool, {2});
  b.As<bool>()[0] = b.As<bool>()[1] = true;
  EXPECT_THROW(RunNode(MakeNode("ArgMin", 1, 1), {b}), Error);
}

}  // namespace
}  // namespace kaiwu
