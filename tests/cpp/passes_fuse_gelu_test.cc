// FuseGelu (passes/rules.h) on graphs shaped as torch's exact GELU export: both
// operand orders become one Gelu node reading x; other numbers, an intermediate
// read elsewhere, or a [1] constant against an x of unknown rank stay apart.
// Numerics: the Gelu kernels' tests and tests/python/test_gelu.py.
#include <cmath>

#include <gtest/gtest.h>

#include "graph_test_util.h"
#include "passes/rules.h"

namespace kaiwu {
namespace {

using testing::CountOps;
using testing::AddFloatValue;
using testing::GraphOp;

int Scalar(Graph& g, const std::string& name, float x, Shape shape = {}) {
  const int v = AddFloatValue(g, name, ValueKind::kConstant);
  g.values[v].data = std::make_shared<Tensor>(DType::kFloat32, shape);
  g.values[v].data->As<float>()[0] = x;
  return v;
}

struct GeluGraph {
  Graph g;
  int x, y, sum;
  // half_first: (x * 0.5) * (1 + erf(x * (1 / sqrt 2))); else x / sqrt 2 and (x * sum) * 0.5.
  explicit GeluGraph(bool half_first = false, float half = 0.5f, int x_rank = 3, Shape const_shape = {}) {
    g.opset = 17;
    x = AddFloatValue(g, "x", ValueKind::kInput, x_rank);
    auto rt = [&](const std::string& n) { return AddFloatValue(g, n, ValueKind::kRuntime); };
    const int scaled = rt("scaled"), erf = rt("erf"), m1 = rt("m1");
    sum = rt("sum");
    y = rt("y");
    g.inputs = {x};
    g.outputs = {y};
    if (half_first)
      g.AddNode(GraphOp("Mul", {Scalar(g, "r2", static_cast<float>(std::sqrt(0.5)), const_shape), x}, {scaled}));
    else
      g.AddNode(GraphOp("Div", {x, Scalar(g, "s2", static_cast<float>(std::sqrt(2.0)), const_shape)}, {scaled}));
    g.AddNode(GraphOp("Erf", {scaled}, {erf}));
    g.AddNode(GraphOp("Add", {Scalar(g, "one", 1.f, const_shape), erf}, {sum}));
    if (half_first) {
      g.AddNode(GraphOp("Mul", {x, Scalar(g, "half", half, const_shape)}, {m1}));
      g.AddNode(GraphOp("Mul", {sum, m1}, {y}));
    } else {
      g.AddNode(GraphOp("Mul", {x, sum}, {m1}));
      g.AddNode(GraphOp("Mul", {m1, Scalar(g, "half", half, const_shape)}, {y}));
    }
    g.Verify();
  }
};

TEST(FuseGelu, BothExportOrdersBecomeOneGelu) {
  for (bool half_first : {false, true}) {
    GeluGraph a(half_first);
    ASSERT_EQ(FuseGelu(&a.g), 1) << half_first;
    EXPECT_EQ(a.g.nodes.size(), 1u);
    const Node& n = a.g.nodes[0];
    EXPECT_EQ(n.op_type, "Gelu");
    EXPECT_EQ(n.inputs, std::vector<int>{a.x});
    EXPECT_EQ(n.outputs, std::vector<int>{a.y});
    EXPECT_EQ(n.GetString("approximate", "none"), "none");
  }
  GeluGraph shaped(false, 0.5f, 2, Shape{1});  // [1] constants against a rank-2 x
  EXPECT_EQ(FuseGelu(&shaped.g), 1);
}

TEST(FuseGelu, LeavesOtherGraphsAlone) {
  {
    GeluGraph a(false, 0.49f);  // not GELU
    EXPECT_EQ(FuseGelu(&a.g), 0);
    EXPECT_EQ(CountOps(a.g, "Erf"), 1);
  }
  {
    GeluGraph a;  // 1 + erf is also read elsewhere
    const int other = a.g.AddValue(Value{"other"});
    a.g.AddNode(GraphOp("Relu", {a.sum}, {other}));
    a.g.outputs.push_back(other);
    EXPECT_EQ(FuseGelu(&a.g), 0);
  }
  {
    GeluGraph a(false, 0.5f, /*x_rank=*/-1, Shape{1});  // [1] constants could broadcast a scalar x
    EXPECT_EQ(FuseGelu(&a.g), 0);
  }
}

}  // namespace
}  // namespace kaiwu
