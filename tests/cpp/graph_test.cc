#include "ir/graph.h"

#include <gtest/gtest.h>

namespace kaiwu {
namespace {

int AddRuntime(Graph& g, const std::string& name) {
  Value v;
  v.name = name;
  return g.AddValue(v);
}

Node MakeNode(const std::string& op, const std::string& name, std::vector<int> in, std::vector<int> out) {
  Node n;
  n.op_type = op;
  n.name = name;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

TEST(Graph, VerifySortsNodesTopologically) {
  Graph g;
  int x = AddRuntime(g, "x");
  g.values[x].kind = ValueKind::kInput;
  g.inputs = {x};
  int a = AddRuntime(g, "a"), b = AddRuntime(g, "b");
  g.AddNode(MakeNode("Relu", "second", {a}, {b}));
  g.AddNode(MakeNode("Relu", "first", {x}, {a}));
  g.outputs = {b};
  g.Verify();
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0].name, "first");
  EXPECT_EQ(g.nodes[1].name, "second");
  EXPECT_EQ(g.values[b].producer, 1);
}

TEST(Graph, CycleIsReportedWithItsNodes) {
  Graph g;
  int a = AddRuntime(g, "a"), b = AddRuntime(g, "b");
  g.AddNode(MakeNode("Relu", "n1", {a}, {b}));
  g.AddNode(MakeNode("Relu", "n2", {b}, {a}));
  g.outputs = {b};
  try {
    g.Verify();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kModel);
    EXPECT_NE(std::string(e.what()).find("cycle"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("n1"), std::string::npos);
  }
}

TEST(Graph, InputWithoutProducerIsReported) {
  Graph g;
  int a = AddRuntime(g, "ghost"), b = AddRuntime(g, "b");
  g.AddNode(MakeNode("Relu", "reader", {a}, {b}));
  g.outputs = {b};
  try {
    g.Verify();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kModel);
    EXPECT_NE(std::string(e.what()).find("ghost"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("reader"), std::string::npos);
  }
}

TEST(Graph, RemoveDeadNodesKeepsOnlyWhatOutputsNeed) {
  Graph g;
  int x = AddRuntime(g, "x");
  g.values[x].kind = ValueKind::kInput;
  g.inputs = {x};
  int a = AddRuntime(g, "a"), dead = AddRuntime(g, "dead");
  g.AddNode(MakeNode("Relu", "used", {x}, {a}));
  g.AddNode(MakeNode("Relu", "unused", {x}, {dead}));
  g.outputs = {a};
  g.Verify();
  g.RemoveDeadNodes();
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].name, "used");
}

TEST(Graph, ShapeOperandsAreKnownPerOp) {
  EXPECT_TRUE(IsShapeOperand("Reshape", 1));
  EXPECT_FALSE(IsShapeOperand("Reshape", 0));
  EXPECT_TRUE(IsShapeOperand("Slice", 3));
  EXPECT_FALSE(IsShapeOperand("Pad", 2));  // constant_value is data
  EXPECT_FALSE(IsShapeOperand("Gemm", 1));
}

}  // namespace
}  // namespace kaiwu
