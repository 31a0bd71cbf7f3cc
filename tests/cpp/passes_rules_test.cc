// Graph-level checks of the optimizer rules on hand-built graphs: structure
// after each rule, and that the graph still verifies. Numerical equality is
// covered by tests/python/test_passes.py against onnxruntime.
#include <gtest/gtest.h>

#include "passes/match_util.h"
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

// Transpose -> GRU/LSTM (layout 0) -> Squeeze(1) -> Transpose, as a batch_first
// export writes it; `states` adds initial states and Y_h (/ Y_c) outputs.
struct BatchFirstGraph {
  Graph g;
  int x = -1, y = -1, h0 = -1, hn = -1, rnn = -1;
};

BatchFirstGraph MakeBatchFirst(const std::string& op, bool states, bool extra_reader = false) {
  BatchFirstGraph b;
  Graph& g = b.g;
  b.x = Runtime(g, "x", ValueKind::kInput);
  g.inputs = {b.x};
  int w = Runtime(g, "w", ValueKind::kWeight), r = Runtime(g, "r", ValueKind::kWeight);
  int xt = Runtime(g, "xt"), y4 = Runtime(g, "y4"), y3 = Runtime(g, "y3");
  b.y = Runtime(g, "y");
  Node t1 = Op("Transpose", {b.x}, {xt});
  t1.attrs["perm"] = IntsAttr({1, 0, 2});
  g.AddNode(t1);
  std::vector<int> in = {xt, w, r}, out = {y4};
  if (states) {
    b.h0 = Runtime(g, "h0", ValueKind::kInput);
    g.inputs.push_back(b.h0);
    in.insert(in.end(), {-1, -1, b.h0});
    b.hn = Runtime(g, "hn");
    out.push_back(b.hn);
    if (op == "LSTM") {
      int c0 = Runtime(g, "c0", ValueKind::kInput);
      g.inputs.push_back(c0);
      in.push_back(c0);
      out.push_back(Runtime(g, "cn"));
    }
  }
  Node rnn = Op(op, in, out);
  rnn.attrs["hidden_size"] = IntAttr(8);
  g.AddNode(rnn);
  g.AddNode(Op("Squeeze", {y4, Ints(g, "axes", {1})}, {y3}));
  Node t2 = Op("Transpose", {y3}, {b.y});
  t2.attrs["perm"] = IntsAttr({1, 0, 2});
  g.AddNode(t2);
  g.outputs = {b.y};
  for (size_t k = 1; k < out.size(); ++k) g.outputs.push_back(out[k]);
  if (extra_reader) {
    int z = Runtime(g, "z");
    g.AddNode(Op("Relu", {y4}, {z}));
    g.outputs.push_back(z);
  }
  g.Verify();
  return b;
}

const Node* OnlyNode(const Graph& g, const std::string& op) {
  const Node* found = nullptr;
  for (const Node& n : g.nodes)
    if (n.op_type == op) found = found ? nullptr : &n;
  return found;
}

// A static [K, N] float matrix (or bias [N]) for the rules that need one.
int Weight(Graph& g, const std::string& name, Shape shape) {
  Value v;
  v.name = name;
  v.kind = ValueKind::kConstant;
  v.dtype = DType::kFloat32;
  v.data = std::make_shared<Tensor>(DType::kFloat32, shape);
  v.has_shape = true;
  for (int64_t d : shape) v.dims.push_back(Dim{d, ""});
  return g.AddValue(v);
}

// Transpose([1, 0, 2]) -> MatMul(W) -> Add(b), with a Shape reading the transpose
// (torch's MHA export): the transpose moves below the Add, the MatMul reads x, and
// the Shape reads Gather(Shape(x), perm).
TEST(PassesRules, TransposeSinksBelowMatMulAndBias) {
  Graph g;
  int x = Runtime(g, "x", ValueKind::kInput);
  g.inputs = {x};
  int w = Weight(g, "W", {6, 5}), b = Weight(g, "b", {5});
  int t = Runtime(g, "t"), m = Runtime(g, "m"), y = Runtime(g, "y"), s = Runtime(g, "s");
  Node tr = Op("Transpose", {x}, {t});
  tr.attrs["perm"] = IntsAttr({1, 0, 2});
  g.AddNode(tr);
  g.AddNode(Op("MatMul", {t, w}, {m}));
  g.AddNode(Op("Add", {m, b}, {y}));
  g.AddNode(Op("Shape", {t}, {s}));
  g.values[s].dtype = DType::kInt64;
  g.outputs = {y, s};
  g.Verify();
  EXPECT_EQ(SinkTransposeBelowMatMul(&g), 1);
  const Node* mm = OnlyNode(g, "MatMul");
  const Node* trn = OnlyNode(g, "Transpose");
  const Node* sh = OnlyNode(g, "Shape");
  const Node* ga = OnlyNode(g, "Gather");
  ASSERT_TRUE(mm && trn && sh && ga);
  EXPECT_EQ(mm->inputs[0], x);
  EXPECT_EQ(trn->outputs[0], y);
  EXPECT_EQ(sh->inputs[0], x);
  EXPECT_EQ(ga->outputs[0], s);
  // The transpose runs after the Add it now follows.
  int at_add = -1, at_t = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].op_type == "Add") at_add = static_cast<int>(i);
    if (g.nodes[i].op_type == "Transpose") at_t = static_cast<int>(i);
  }
  EXPECT_LT(at_add, at_t);
  EXPECT_EQ(SinkTransposeBelowMatMul(&g), 0);  // nothing left to move
}

TEST(PassesRules, TransposeStaysWhereItMustNotSink) {
  // The last dim moves, or another op reads the transpose.
  for (int variant = 0; variant < 2; ++variant) {
    Graph g;
    int x = Runtime(g, "x", ValueKind::kInput);
    g.inputs = {x};
    int w = Weight(g, "W", {6, 5});
    int t = Runtime(g, "t"), y = Runtime(g, "y"), r = Runtime(g, "r");
    Node tr = Op("Transpose", {x}, {t});
    tr.attrs["perm"] = variant == 0 ? IntsAttr({0, 2, 1}) : IntsAttr({1, 0, 2});
    g.AddNode(tr);
    g.AddNode(Op("MatMul", {t, w}, {y}));
    g.outputs = {y};
    if (variant == 1) {
      g.AddNode(Op("Relu", {t}, {r}));
      g.outputs.push_back(r);
    }
    g.Verify();
    EXPECT_EQ(SinkTransposeBelowMatMul(&g), 0) << variant;
    EXPECT_EQ(OnlyNode(g, "MatMul")->inputs[0], t) << variant;
  }
}

TEST(PassesRules, BatchFirstGruWithStatesBecomesLayout1) {
  BatchFirstGraph b = MakeBatchFirst("GRU", true);
  EXPECT_EQ(FoldRnnBatchFirst(&b.g), 1);
  EXPECT_EQ(Count(b.g, "Transpose"), 0);
  const Node* gru = OnlyNode(b.g, "GRU");
  ASSERT_NE(gru, nullptr);
  EXPECT_EQ(gru->GetInt("layout", 0), 1);
  EXPECT_EQ(gru->inputs[0], b.x);
  // initial_h through a Reshape to [-1, 1, 8]; Y_h back through one to [1, -1, 8].
  ASSERT_EQ(Count(b.g, "Reshape"), 2);
  std::vector<int64_t> shape;
  const Node& in_reshape = b.g.nodes[b.g.values[gru->inputs[5]].producer];
  EXPECT_EQ(in_reshape.op_type, "Reshape");
  EXPECT_EQ(in_reshape.inputs[0], b.h0);
  ASSERT_TRUE(ConstInts(b.g, in_reshape.inputs[1], &shape));
  EXPECT_EQ(shape, (std::vector<int64_t>{-1, 1, 8}));
  const Node& out_reshape = b.g.nodes[b.g.values[b.hn].producer];
  EXPECT_EQ(out_reshape.op_type, "Reshape");
  EXPECT_EQ(out_reshape.inputs[0], gru->outputs[1]);
  ASSERT_TRUE(ConstInts(b.g, out_reshape.inputs[1], &shape));
  EXPECT_EQ(shape, (std::vector<int64_t>{1, -1, 8}));
  // The Squeeze drops axis 2 of Y and writes the graph output.
  const Node& squeeze = b.g.nodes[b.g.values[b.y].producer];
  EXPECT_EQ(squeeze.op_type, "Squeeze");
  EXPECT_EQ(squeeze.inputs[0], gru->outputs[0]);
  ASSERT_TRUE(ConstInts(b.g, squeeze.inputs[1], &shape));
  EXPECT_EQ(shape, (std::vector<int64_t>{2}));
}

TEST(PassesRules, BatchFirstLstmReshapesBothStates) {
  BatchFirstGraph b = MakeBatchFirst("LSTM", true);
  EXPECT_EQ(FoldRnnBatchFirst(&b.g), 1);
  EXPECT_EQ(Count(b.g, "Transpose"), 0);
  EXPECT_EQ(Count(b.g, "Reshape"), 4);  // initial_h, initial_c, Y_h, Y_c
  EXPECT_EQ(OnlyNode(b.g, "LSTM")->GetInt("layout", 0), 1);
}

TEST(PassesRules, BatchFirstWithoutStates) {
  BatchFirstGraph b = MakeBatchFirst("GRU", false);
  EXPECT_EQ(FoldRnnBatchFirst(&b.g), 1);
  EXPECT_EQ(Count(b.g, "Transpose"), 0);
  EXPECT_EQ(Count(b.g, "Reshape"), 0);
}

TEST(PassesRules, BatchFirstMustNotFire) {
  // Y read by another node too.
  BatchFirstGraph shared = MakeBatchFirst("GRU", true, /*extra_reader=*/true);
  EXPECT_EQ(FoldRnnBatchFirst(&shared.g), 0);
  EXPECT_EQ(Count(shared.g, "Transpose"), 2);
  // Bidirectional, already batch-first, and another permutation.
  for (int c = 0; c < 3; ++c) {
    BatchFirstGraph b = MakeBatchFirst("GRU", true);
    for (Node& n : b.g.nodes) {
      if (c == 0 && n.op_type == "GRU") {
        Attribute dir;
        dir.kind = Attribute::Kind::kString;
        dir.s = "bidirectional";
        n.attrs["direction"] = dir;
      }
      if (c == 1 && n.op_type == "GRU") n.attrs["layout"] = IntAttr(1);
      if (c == 2 && n.op_type == "Transpose" && n.outputs[0] == b.y) n.attrs["perm"] = IntsAttr({0, 1, 2});
    }
    EXPECT_EQ(FoldRnnBatchFirst(&b.g), 0) << c;
    EXPECT_EQ(Count(b.g, "Transpose"), 2) << c;
  }
}

}  // namespace
}  // namespace kaiwu
