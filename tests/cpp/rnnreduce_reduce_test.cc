// Reduce* kernels against a naive float64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "kernel_harness.h"

namespace kaiwu {
namespace {

using testing::IntAttr;
using testing::IntsAttr;
using testing::MakeNode;
using testing::MakeTensor;
using testing::RunNode;

const char* const kOps[] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                            "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare",
                            "ReduceLogSum", "ReduceLogSumExp"};

double Finish(const std::string& op, const std::vector<double>& v) {
  double acc;
  if (op == "ReduceMax" || op == "ReduceLogSumExp") {
    acc = -INFINITY;
    for (double x : v) acc = std::max(acc, x);
    if (op == "ReduceMax") return acc;
    double s = 0;
    for (double x : v) s += std::exp(x - acc);
    return acc + std::log(s);
  }
  if (op == "ReduceMin") {
    acc = INFINITY;
    for (double x : v) acc = std::min(acc, x);
    return acc;
  }
  if (op == "ReduceProd") {
    acc = 1;
    for (double x : v) acc *= x;
    return acc;
  }
  acc = 0;
  for (double x : v) acc += op == "ReduceL1" ? std::abs(x) : (op == "ReduceL2" || op == "ReduceSumSquare") ? x * x : x;
  if (op == "ReduceMean") return acc / v.size();
  if (op == "ReduceL2") return std::sqrt(acc);
  if (op == "ReduceLogSum") return std::log(acc);
  return acc;
}

// Reference: groups input elements by output index. Returns output shape too.
std::vector<double> Reference(const std::string& op, const Shape& shape,
                              const std::vector<double>& x, const std::set<int64_t>& axes,
                              bool keepdims, Shape* out_shape) {
  const int64_t rank = shape.size();
  out_shape->clear();
  Shape kept;
  for (int64_t d = 0; d < rank; ++d) {
    if (axes.count(d)) {
      if (keepdims) out_shape->push_back(1);
    } else {
      out_shape->push_back(shape[d]);
      kept.push_back(shape[d]);
    }
  }
  std::vector<std::vector<double>> groups(NumElements(kept));
  std::vector<int64_t> idx(rank, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t o = 0;
    for (int64_t d = 0; d < rank; ++d)
      if (!axes.count(d)) o = o * shape[d] + idx[d];
    groups[o].push_back(x[i]);
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  std::vector<double> out;
  for (auto& g : groups) out.push_back(Finish(op, g));
  return out;
}

// Runs one random case; `axes_as_input` selects the opset-18 input form.
template <typename T>
void CheckCase(const std::string& op, const Shape& shape, const std::vector<int64_t>& axes,
               bool keepdims, bool axes_as_input, int threads, std::mt19937& rng) {
  Tensor x(DTypeOf<T>::value, shape);
  std::vector<double> xd(x.size());
  for (int64_t i = 0; i < x.size(); ++i) {
    T v;
    if constexpr (std::is_floating_point_v<T>) {
      bool positive = op == "ReduceLogSum";
      v = std::uniform_real_distribution<T>(positive ? 0.1 : -2, 2)(rng);
      if (op == "ReduceProd") v = std::uniform_real_distribution<T>(0.6, 1.4)(rng);
    } else {
      v = static_cast<T>(std::uniform_int_distribution<int>(-5, 5)(rng));
      if (op == "ReduceProd") v = rng() % 2 ? 1 : -1;
    }
    x.As<T>()[i] = v;
    xd[i] = v;
  }
  std::map<std::string, Attribute> attrs{{"keepdims", IntAttr(keepdims)}};
  Node node = MakeNode(op, axes_as_input ? 2 : 1, 1);
  std::vector<Tensor> inputs{x};
  if (axes_as_input) {
    node.opset = 18;
    inputs.push_back(axes.empty() ? Tensor(DType::kInt64, {0})
                                  : MakeTensor<int64_t>({static_cast<int64_t>(axes.size())}, axes));
  } else {
    node.opset = 13;
    if (!axes.empty()) attrs["axes"] = IntsAttr(axes);
  }
  node.attrs = attrs;
  std::set<int64_t> ax;
  for (int64_t a : axes) ax.insert(a < 0 ? a + shape.size() : a);
  if (axes.empty())
    for (size_t d = 0; d < shape.size(); ++d) ax.insert(d);
  Shape want_shape;
  std::vector<double> want = Reference(op, shape, xd, ax, keepdims, &want_shape);
  std::vector<Tensor> out = RunNode(node, inputs, threads);
  ASSERT_EQ(out[0].shape(), want_shape) << op;
  ASSERT_EQ(out[0].dtype(), DTypeOf<T>::value);
  for (size_t i = 0; i < want.size(); ++i) {
    double got = out[0].As<T>()[i];
    double w = want[i];
    if constexpr (!std::is_floating_point_v<T>) w = op == "ReduceMean" ? std::trunc(w) : w;
    ASSERT_NEAR(got, w, 1e-4 * (1 + std::abs(w)))
        << op << " shape " << ShapeToString(shape) << " out " << i << " threads " << threads;
  }
}

std::vector<int64_t> RandomAxes(int64_t rank, std::mt19937& rng) {
  std::vector<int64_t> axes;
  for (int64_t d = 0; d < rank; ++d)
    if (rng() % 2) axes.push_back(rng() % 2 ? d : d - rank);
  std::shuffle(axes.begin(), axes.end(), rng);
  return axes;
}

TEST(RnnReduceReduce, FloatMatchesReference) {
  std::mt19937 rng(11);
  for (const char* op : kOps) {
    for (int iter = 0; iter < 12; ++iter) {
      int64_t rank = 1 + rng() % 4;
      Shape shape;
      for (int64_t d = 0; d < rank; ++d) shape.push_back(1 + rng() % 5);
      std::vector<int64_t> axes = RandomAxes(rank, rng);
      CheckCase<float>(op, shape, axes, iter % 2, iter % 3 == 0, 1 + 2 * (iter % 2), rng);
    }
  }
}

// Large enough to split across threads: innermost, leading and middle axes.
TEST(RnnReduceReduce, FastPathsParallel) {
  std::mt19937 rng(12);
  for (const char* op : kOps)
    for (int threads : {1, 3}) {
      CheckCase<float>(op, {64, 300}, {1}, false, true, threads, rng);
      CheckCase<float>(op, {300, 70}, {0}, true, false, threads, rng);
      CheckCase<float>(op, {4, 30, 300}, {1}, false, true, threads, rng);
      CheckCase<float>(op, {20, 6, 30, 7}, {0, 2}, true, true, threads, rng);
      CheckCase<double>(op, {5, 1, 9}, {0, 1}, false, false, threads, rng);
    }
}

TEST(RnnReduceReduce, IntegerTypes) {
  std::mt19937 rng(13);
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                         "ReduceL1", "ReduceSumSquare"})
    for (int iter = 0; iter < 6; ++iter) {
      int64_t rank = 1 + rng() % 3;
      Shape shape;
      for (int64_t d = 0; d < rank; ++d) shape.push_back(1 + rng() % 4);
      std::vector<int64_t> axes = RandomAxes(rank, rng);
      CheckCase<int32_t>(op, shape, axes, iter % 2, iter % 2, 1, rng);
      CheckCase<int64_t>(op, shape, axes, iter % 2 == 0, iter % 3 == 0, 3, rng);
    }
  for (const char* op : {"ReduceMax", "ReduceMin"}) {
    CheckCase<int8_t>(op, {3, 4, 5}, {1}, true, true, 1, rng);
    CheckCase<uint8_t>(op, {3, 4, 5}, {0, 2}, false, true, 1, rng);
  }
}

TEST(RnnReduceReduce, BoolMaxMin) {
  Tensor b(DType::kBool, {2, 3});
  const bool v[] = {false, true, false, true, true, true};
  for (int i = 0; i < 6; ++i) b.As<bool>()[i] = v[i];
  Node any = MakeNode("ReduceMax", 1, 1, {{"axes", IntsAttr({1})}, {"keepdims", IntAttr(0)}});
  auto out = RunNode(any, {b});
  ASSERT_EQ(out[0].dtype(), DType::kBool);
  EXPECT_TRUE(out[0].As<bool>()[0]);
  EXPECT_TRUE(out[0].As<bool>()[1]);
  Node all = MakeNode("ReduceMin", 1, 1, {{"axes", IntsAttr({1})}, {"keepdims", IntAttr(0)}});
  out = RunNode(all, {b});
  EXPECT_FALSE(out[0].As<bool>()[0]);
  EXPECT_TRUE(out[0].As<bool>()[1]);
}

TEST(RnnReduceReduce, EmptyAxesAndEmptyInputs) {
  std::mt19937 rng(14);
  Tensor x = testing::RandomTensor({2, 3}, rng);
  // noop_with_empty_axes: identity.
  Node noop = MakeNode("ReduceSum", 2, 1, {{"noop_with_empty_axes", IntAttr(1)}});
  auto out = RunNode(noop, {x, Tensor(DType::kInt64, {0})});
  ASSERT_EQ(out[0].shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out[0].As<float>()[i], x.As<float>()[i]);
  // Empty axes without noop: reduce everything; omitted axes input too.
  Node all = MakeNode("ReduceMax", 2, 1, {{"keepdims", IntAttr(0)}});
  for (Tensor axes : {Tensor(DType::kInt64, {0}), Tensor()}) {
    out = RunNode(all, {x, axes});
    ASSERT_EQ(out[0].shape(), Shape{});
    float m = x.As<float>()[0];
    for (int i = 1; i < 6; ++i) m = std::max(m, x.As<float>()[i]);
    EXPECT_EQ(out[0].As<float>()[0], m);
  }
  // Reducing an empty dimension yields the identity.
  Tensor empty(DType::kFloat32, {2, 0, 3});
  Node sum = MakeNode("ReduceSum", 1, 1, {{"axes", IntsAttr({1})}});
  out = RunNode(sum, {empty});
  ASSERT_EQ(out[0].shape(), (Shape{2, 1, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out[0].As<float>()[i], 0.f);
  Node prod = MakeNode("ReduceProd", 1, 1, {{"axes", IntsAttr({1})}, {"keepdims", IntAttr(0)}});
  out = RunNode(prod, {empty});
  ASSERT_EQ(out[0].shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out[0].As<float>()[i], 1.f);
  // Kept empty dimension: empty output.
  Node sum0 = MakeNode("ReduceSum", 1, 1, {{"axes", IntsAttr({2})}});
  out = RunNode(sum0, {empty});
  ASSERT_EQ(out[0].shape(), (Shape{2, 0, 1}));
}

TEST(RnnReduceReduce, BadInputsThrow) {
  std::mt19937 rng(15);
  Tensor x = testing::RandomTensor({2, 3}, rng);
  Node repeated = MakeNode("ReduceSum", 1, 1, {{"axes", IntsAttr({1, -1})}});
  EXPECT_THROW(RunNode(repeated, {x}), Error);
  Node range = MakeNode("ReduceMean", 2, 1);
  EXPECT_THROW(RunNode(range, {x, MakeTensor<int64_t>({1}, {2})}), Error);
  Node lse = MakeNode("ReduceLogSumExp", 1, 1);
  EXPECT_THROW(RunNode(lse, {MakeTensor<int32_t>({2}, {1, 2})}), Error);
  Node boolsum = MakeNode("ReduceSum", 1, 1);
  Tensor b(DType::kBool, {2});
  b.As<bool>()[0] = true;
  b.As<bool>()[1] = false;
  EXPECT_THROW(RunNode(boolsum, {b}), Error);
}

}  // namespace
}  // namespace kaiwu
