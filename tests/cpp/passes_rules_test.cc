// Graph-level checks of the optimizer rules on hand-built graphs: structure
// after each rule, and that the graph still verifies. Numerical equality is
// covered by tests/python/test_passes.py against onnxruntime.
#include <gtest/gtest.h>

#include "passes/pass_manager.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"
#include "graph_test_util.h"

namespace kaiwu {
namespace {

constexpr auto Op = testing::GraphOp;
constexpr auto Count = testing::CountOps;

int Runtime(Graph& g, const std::string& name, ValueKind kind = ValueKind::kRuntime) {
  Value v;
  v.name = name;
  v.kind = kind;
  v.dtype = DType::kFloat32;
  return g.AddValue(v);
}

int Ints(Graph& g, const std::string& name, std::vector<int64_t> vals) {
  Value v;
  v.name = name;
  v.kind = ValueKind::kConstant;
  v.dtype = DType::kInt64;
  v.data = std::make_shared<Tensor>(DType::kInt64, Shape{static_cast<int64_t>(vals.size())});
  for (size_t i = 0; i < vals.size(); ++i) v.data->As<int64_t>()[i] = vals[i];
  v.has_shape = true;
  v.dims = {Dim{static_cast<int64_t>(vals.size()), ""}};
  return g.AddValue(v);
}


TEST(PassesRules, SplitConcatSameAxisIsIdentity) {
  Graph g;
  int x = Runtime(g, "x", ValueKind::kInput);
  g.inputs = {x};
  int sizes = Ints(g, "sizes", {2, 3});
  int p0 = Runtime(g, "p0"), p1 = Runtime(g, "p1"), y = Runtime(g, "y"), z = Runtime(g, "z");
  Node split = Op("Split", {x, sizes}, {p0, p1});
  split.attrs["axis"] = IntAttr(1);
  Node concat = Op("Concat", {p0, p1}, {y});
  concat.attrs["axis"] = IntAttr(1);
  g.AddNode(split);
  g.AddNode(concat);
  g.AddNode(Op("Relu", {y}, {z}));
  g.outputs = {z};
  g.Verify();
  PassStats stats;
  Optimize(&g, &stats);
  EXPECT_EQ(stats.fired["fold_split_concat"], 1);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op_type, "Relu");
  EXPECT_EQ(g.nodes[0].inputs[0], x);
}

TEST(PassesRules, CseMergesSameOpSameInputsSameAttributes) {
  Graph g;
  int x = Runtime(g, "x", ValueKind::kInput);
  g.inputs = {x};
  int a = Runtime(g, "a"), b = Runtime(g, "b"), c = Runtime(g, "c"), y = Runtime(g, "y");
  Node t1 = Op("Transpose", {x}, {a}), t2 = Op("Transpose", {x}, {b}), t3 = Op("Transpose", {x}, {c});
  t1.attrs["perm"] = IntsAttr({1, 0});
  t2.attrs["perm"] = IntsAttr({1, 0});
  t3.attrs["perm"] = IntsAttr({0, 1});
  g.AddNode(t1);
  g.AddNode(t2);
  g.AddNode(t3);
  g.AddNode(Op("Sum", {a, b, c}, {y}));
  g.outputs = {y};
  g.Verify();
  EXPECT_EQ(EliminateCommonSubexpr(&g), 1);
  EXPECT_EQ(Count(g, "Transpose"), 2);
  for (const Node& n : g.nodes)
    if (n.op_type == "Sum") EXPECT_EQ(n.inputs[0], n.inputs[1]);
}

TEST(PassesRules, TransposePairThroughReluCancels) {
  Graph g;
  int x = Runtime(g, "x", ValueKind::kInput);
  g.inputs = {x};
  int a = Runtime(g, "a"), r = Runtime(g, "r"), y = Runtime(g, "y");
  Node t1 = Op("Transpose", {x}, {a}), t2 = Op("Transpose", {r}, {y});
  t1.attrs["perm"] = IntsAttr({0, 2, 3, 1});
  t2.attrs["perm"] = IntsAttr({0, 3, 1, 2});
  g.AddNode(t1);
  g.AddNode(Op("Relu", {a}, {r}));
  g.AddNode(t2);
  g.outputs = {y};
  g.Verify();
  EXPECT_EQ(FoldTransposePair(&g), 1);
  EXPECT_EQ(Count(g, "Transpose"), 0);
  EXPECT_EQ(Count(g, "Identity"), 1);  // writes the graph output; Relu reads x's copy
  EXPECT_EQ(g.values[y].producer >= 0, true);
}

TEST(PassesRules, NothingFiresOnAPlainChain) {
  Graph g;
  int x = Runtime(g, "x", ValueKind::kInput);
  g.inputs = {x};
  int a = Runtime(g, "a"), y = Runtime(g, "y");
  g.AddNode(Op("Relu", {x}, {a}));
  g.AddNode(Op("Softmax", {a}, {y}));
  g.outputs = {y};
  g.Verify();
  PassStats stats;
  Optimize(&g, &stats);
  EXPECT_TRUE(stats.fired.empty());
  EXPECT_EQ(g.nodes.size(), 2u);
}

}  // namespace
}  // namespace kaiwu
