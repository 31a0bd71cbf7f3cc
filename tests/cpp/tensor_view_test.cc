// Views (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout) and
// shape-derived ops (Shape, Size, ConstantOfShape, Range).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "tensor_ops_test_util.h"

namespace kaiwu {
namespace {

using testing::AsDouble;
using testing::ExpectError;
using testing::ExpectTensor;
using testing::Ints;
using testing::IntAttr;
using testing::IntsAttr;
using testing::MakeNode;
using testing::MakeTensor;
using testing::PrepareOnly;
using testing::RandomOf;
using testing::RunNode;

// A view keeps the data and changes the shape; it declares the alias.
void ExpectView(const Node& node, const std::vector<Tensor>& inputs, const Shape& want) {
  for (int threads : {1, 3}) {
    std::vector<Tensor> out = RunNode(node, inputs, threads);
    ExpectTensor(out[0], want, AsDouble(inputs[0]), node.op_type);
  }
  PrepareContext ctx = PrepareOnly(node, inputs);
  EXPECT_EQ(ctx.alias[0], 0) << node.op_type;
}

TEST(TensorOpsView, ReshapeZeroAndMinusOne) {
  std::mt19937 rng(1);
  Tensor x = RandomOf(DType::kFloat32, {2, 3, 4}, rng);
  Node n = MakeNode("Reshape", 2, 1);
  ExpectView(n, {x, Ints({0, -1})}, {2, 12});
  ExpectView(n, {x, Ints({-1, 0, 2})}, {4, 3, 2});
  ExpectView(n, {x, Ints({24})}, {24});
  ExpectView(n, {x, Ints({0, 0, 0})}, {2, 3, 4});
  Tensor big = RandomOf(DType::kInt64, {64, 300, 5}, rng);  // large enough to split the copy
  ExpectView(n, {big, Ints({-1, 0})}, {320, 300});
  // allowzero=1: a 0 is a real zero-sized dim.
  Node nz = MakeNode("Reshape", 2, 1, {{"allowzero", IntAttr(1)}});
  Tensor empty(DType::kFloat32, {0, 5});
  std::vector<Tensor> out = RunNode(nz, {empty, Ints({5, 0})});
  EXPECT_EQ(ShapeToString(out[0].shape()), ShapeToString({5, 0}));
}

TEST(TensorOpsView, ReshapeErrors) {
  std::mt19937 rng(2);
  Tensor x = RandomOf(DType::kFloat32, {2, 3, 4}, rng);
  Node n = MakeNode("Reshape", 2, 1);
  for (auto shape : std::vector<std::vector<int64_t>>{{-1, -1}, {5, -1}, {2, 3, 5}, {0, 0, 0, 0},
                                                      {-2, 12}}) {
    ExpectError([&] { RunNode(n, {x, Ints(shape)}); }, StatusCode::kModel, "reshape");
  }
}

TEST(TensorOpsView, FlattenEveryAxis) {
  std::mt19937 rng(3);
  Tensor x = RandomOf(DType::kFloat32, {2, 3, 4, 5}, rng);
  for (int64_t axis = -4; axis <= 4; ++axis) {
    int64_t a = axis < 0 ? axis + 4 : axis, outer = 1;
    for (int64_t d = 0; d < a; ++d) outer *= x.shape()[d];
    ExpectView(MakeNode("Flatten", 1, 1, {{"axis", IntAttr(axis)}}), {x}, {outer, 120 / outer});
  }
  ExpectError([&] { RunNode(MakeNode("Flatten", 1, 1, {{"axis", IntAttr(5)}}), {x}); },
              StatusCode::kModel, "flatten axis 5");
}

TEST(TensorOpsView, SqueezeUnsqueeze) {
  std::mt19937 rng(4);
  Tensor x = RandomOf(DType::kInt32, {1, 3, 1, 4}, rng);
  Node sq = MakeNode("Squeeze", 2, 1);
  ExpectView(sq, {x, Ints({-2})}, {1, 3, 4});
  ExpectView(sq, {x, Ints({0, 2})}, {3, 4});
  ExpectView(MakeNode("Squeeze", 1, 1), {x}, {3, 4});  // no axes: every 1
  Node sq11 = MakeNode("Squeeze", 1, 1, {{"axes", IntsAttr({0})}});
  sq11.opset = 11;  // attribute form
  ExpectView(sq11, {x}, {3, 1, 4});
  ExpectError([&] { RunNode(sq, {x, Ints({1})}); }, StatusCode::kModel, "squeeze size 3");
  ExpectError([&] { RunNode(sq, {x, Ints({4})}); }, StatusCode::kModel, "squeeze axis 4");

  Tensor y = RandomOf(DType::kFloat32, {3, 4}, rng);
  Node un = MakeNode("Unsqueeze", 2, 1);
  ExpectView(un, {y, Ints({0})}, {1, 3, 4});
  ExpectView(un, {y, Ints({-1, 1})}, {3, 1, 4, 1});
  ExpectView(un, {y, Ints({0, 3})}, {1, 3, 4, 1});
  Node un11 = MakeNode("Unsqueeze", 1, 1, {{"axes", IntsAttr({-3})}});
  un11.opset = 11;
  ExpectView(un11, {y}, {1, 3, 4});
  ExpectError([&] { RunNode(un, {y, Ints({1, 1})}); }, StatusCode::kModel, "repeated");
  ExpectError([&] { RunNode(MakeNode("Unsqueeze", 1, 1), {y}); }, StatusCode::kModel, "no axes");
}

TEST(TensorOpsView, IdentityAndDropout) {
  std::mt19937 rng(5);
  Tensor b = RandomOf(DType::kBool, {7, 3}, rng);
  ExpectView(MakeNode("Identity", 1, 1), {b}, {7, 3});
  Tensor x = RandomOf(DType::kFloat32, {4, 6}, rng);
  ExpectView(MakeNode("Dropout", 1, 1), {x}, {4, 6});
  Node d2 = MakeNode("Dropout", 3, 2);
  Tensor ratio = MakeTensor<float>({}, {0.3f});
  Tensor no = testing::BoolScalar(false);
  std::vector<Tensor> out = RunNode(d2, {x, ratio, no});
  ExpectTensor(out[0], {4, 6}, AsDouble(x), "dropout output");
  ExpectTensor(out[1], {4, 6}, std::vector<double>(24, 1.0), "dropout mask");
  EXPECT_EQ(out[1].dtype(), DType::kBool);
  Tensor yes = testing::BoolScalar(true);
  ExpectError([&] { RunNode(d2, {x, ratio, yes}); }, StatusCode::kModel, "training mode");
  ExpectError([&] { RunNode(d2, {Ints({1, 2}), ratio, no}); }, StatusCode::kModel, "int dtype");
}

TEST(TensorOpsShape, ShapeAndSize) {
  Tensor x(DType::kFloat32, {2, 3, 4, 5});
  struct Case { int64_t start, end; std::vector<double> want; };
  for (const Case& c : std::vector<Case>{{0, 99, {2, 3, 4, 5}}, {1, 3, {3, 4}}, {-2, 4, {4, 5}},
                                         {-9, -1, {2, 3, 4}}, {3, 1, {}}}) {
    Node n = MakeNode("Shape", 1, 1, {{"start", IntAttr(c.start)}, {"end", IntAttr(c.end)}});
    PrepareContext ctx = PrepareOnly(n, {x});
    EXPECT_TRUE(ctx.shape_only);
    std::vector<Tensor> out = RunNode(n, {Tensor(DType::kFloat32, {2, 3, 4, 5})});
    EXPECT_EQ(out[0].dtype(), DType::kInt64);
    ExpectTensor(out[0], {static_cast<int64_t>(c.want.size())}, c.want, "shape");
  }
  std::vector<Tensor> all = RunNode(MakeNode("Shape", 1, 1), {x});
  ExpectTensor(all[0], {4}, {2, 3, 4, 5}, "shape default");
  std::vector<Tensor> size = RunNode(MakeNode("Size", 1, 1), {x});
  ExpectTensor(size[0], {}, {120}, "size");
  EXPECT_TRUE(PrepareOnly(MakeNode("Size", 1, 1), {x}).shape_only);
}

TEST(TensorOpsShape, ConstantOfShape) {
  std::vector<Tensor> out = RunNode(MakeNode("ConstantOfShape", 1, 1), {Ints({2, 3})});
  EXPECT_EQ(out[0].dtype(), DType::kFloat32);
  ExpectTensor(out[0], {2, 3}, std::vector<double>(6, 0.0), "default zeros");
  Attribute v;
  v.kind = Attribute::Kind::kTensor;
  v.t = std::make_shared<Tensor>(MakeTensor<int64_t>({1}, {-7}));
  out = RunNode(MakeNode("ConstantOfShape", 1, 1, {{"value", v}}), {Ints({4, 1, 5})});
  EXPECT_EQ(out[0].dtype(), DType::kInt64);
  ExpectTensor(out[0], {4, 1, 5}, std::vector<double>(20, -7.0), "int64 value");
  v.t = std::make_shared<Tensor>(MakeTensor<float>({1}, {2.5f}));
  out = RunNode(MakeNode("ConstantOfShape", 1, 1, {{"value", v}}), {Ints({3})});
  ExpectTensor(out[0], {3}, {2.5, 2.5, 2.5}, "float value");
  v.t = std::make_shared<Tensor>(MakeTensor<float>({2}, {1.f, 2.f}));
  ExpectError([&] { RunNode(MakeNode("ConstantOfShape", 1, 1, {{"value", v}}), {Ints({3})}); },
              StatusCode::kModel, "two-element value");
}

template <typename T>
void CheckRange(T start, T limit, T delta) {
  std::vector<Tensor> out = RunNode(MakeNode("Range", 3, 1),
      {MakeTensor<T>({}, {start}), MakeTensor<T>({}, {limit}), MakeTensor<T>({}, {delta})});
  std::vector<double> want;
  for (int64_t i = 0;; ++i) {  // numpy arange: start + i * delta while short of limit
    double v = static_cast<double>(start) + static_cast<double>(i) * static_cast<double>(delta);
    if (delta > 0 ? v >= static_cast<double>(limit) : v <= static_cast<double>(limit)) break;
    want.push_back(static_cast<double>(static_cast<T>(v)));
  }
  EXPECT_EQ(out[0].dtype(), DTypeOf<T>::value);
  ExpectTensor(out[0], {static_cast<int64_t>(want.size())}, want, "range");
}

TEST(TensorOpsShape, Range) {
  CheckRange<float>(0.5f, 4.f, 0.75f);
  CheckRange<float>(3.f, -2.f, -1.25f);
  CheckRange<float>(1.f, 1.f, 1.f);
  CheckRange<double>(-1.0, 2.0, 0.25);
  CheckRange<int32_t>(-5, 20, 3);
  CheckRange<int64_t>(10, -4, -2);
  CheckRange<int64_t>(0, -4, 2);  // empty
  ExpectError([] { CheckRange<int32_t>(0, 3, 0); }, StatusCode::kModel, "zero delta");
  ExpectError([] {
    RunNode(MakeNode("Range", 3, 1), {MakeTensor<float>({}, {0.f}), MakeTensor<int64_t>({}, {3}),
                                      MakeTensor<float>({}, {1.f})});
  }, StatusCode::kModel, "mixed dtypes");
}

}  // namespace
}  // namespace kaiwu
