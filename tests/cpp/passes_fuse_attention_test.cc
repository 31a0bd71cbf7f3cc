// FuseAttention (passes/fuse_attention.h) on graphs shaped as torch's attention
// export: what becomes one FusedAttention node (inputs, k_trans, the place in
// the graph), and what stays apart (scores read elsewhere, a softmax over
// another axis, operands of unknown rank, no kernel). Numerics:
// tests/python/test_cuda_attention.py on a GPU; the strides: ops_linalg_test.cc.
#include <gtest/gtest.h>

#include "graph_test_util.h"
#include "passes/fuse_attention.h"
#include "passes/rewrite_util.h"

namespace kaiwu {
namespace {

using testing::CountOps;
using testing::AddFloatValue;
using testing::GraphOp;

// x [B, N, 3, h, d] -> Transpose(q/k/v) -> q * scale, K = Transpose(k), scores = q K
// (+ mask) -> Softmax(axis) -> MatMul(., v) -> y
struct Attention {
  Graph g;
  int x, mask, q, k, v, scores, masked, probs, y, qt, kt, scale, softmax_node = -1;
  // scale_kind: kInput for none, else Div(scores, 8) by a kConstant or a kWeight.
  // half: the runtime values float16 (a half session's), the 8 read through a Cast to float16.
  Attention(bool with_mask = true, int64_t axis = -1, bool shaped = true, bool k_trans = false,
            ValueKind scale_kind = ValueKind::kInput, bool half = false) {
    g.opset = 17;
    x = AddFloatValue(g, "x", ValueKind::kInput, shaped ? 4 : -1);
    mask = AddFloatValue(g, "mask", ValueKind::kInput, 4);
    scale = AddFloatValue(g, "scale", ValueKind::kConstant);
    g.values[scale].data = std::make_shared<Tensor>(DType::kFloat32, Shape{1});
    auto rt = [&](const std::string& n) { return AddFloatValue(g, n, ValueKind::kRuntime); };
    qt = rt("qt");
    kt = rt("kt");
    q = rt("q");
    k = rt("k");
    v = rt("v");
    scores = rt("scores");
    masked = rt("masked");
    probs = rt("probs");
    y = rt("y");
    g.inputs = {x, mask};
    g.outputs = {y};
    Node tq = GraphOp(shaped ? "Transpose" : "Identity", {x}, {qt});
    if (shaped) tq.attrs["perm"] = IntsAttr({0, 2, 1, 3});
    g.AddNode(tq);
    g.AddNode(GraphOp("Mul", {qt, scale}, {q}));
    Node tk = GraphOp("Transpose", {x}, {kt});
    tk.attrs["perm"] = IntsAttr(k_trans ? std::vector<int64_t>{0, 2, 1, 3} : std::vector<int64_t>{0, 2, 3, 1});
    g.AddNode(tk);
    g.AddNode(GraphOp("Mul", {kt, scale}, {k}));
    Node tv = GraphOp("Transpose", {x}, {v});
    tv.attrs["perm"] = IntsAttr({0, 2, 1, 3});
    g.AddNode(tv);
    const bool scaled = scale_kind != ValueKind::kInput;
    const int raw = scaled ? rt("raw") : scores;
    Node mm = GraphOp("MatMul", {q, k}, {raw});
    if (k_trans) mm.attrs["_kaiwu_trans_b"] = IntAttr(1);
    g.AddNode(mm);
    if (scaled) {
      const int eight = AddFloatValue(g, "eight", scale_kind);
      g.values[eight].data = std::make_shared<Tensor>(DType::kFloat32, Shape{});
      g.values[eight].data->As<float>()[0] = 8.f;
      int divisor = eight;
      if (half) {
        divisor = rt("eight16");
        Node c = GraphOp("Cast", {eight}, {divisor});
        c.attrs["to"] = IntAttr(10);
        g.AddNode(c);
      }
      g.AddNode(GraphOp("Div", {raw, divisor}, {scores}));
    }
    if (half)
      for (Value& val : g.values)
        if (val.kind == ValueKind::kRuntime || val.kind == ValueKind::kInput) val.dtype = DType::kFloat16;
    if (with_mask) g.AddNode(GraphOp("Add", {mask, scores}, {masked}));
    Node sm = GraphOp("Softmax", {with_mask ? masked : scores}, {probs});
    sm.opset = 17;
    if (axis != -1) sm.attrs["axis"] = IntAttr(axis);
    softmax_node = g.AddNode(sm);
    g.AddNode(GraphOp("MatMul", {probs, v}, {y}));
    g.Verify();
  }
};

TEST(FuseAttention, MatMulMaskSoftmaxMatMulBecomesOneNode) {
  for (bool k_trans : {false, true}) {
    Attention a(/*with_mask=*/true, -1, true, k_trans);
    ASSERT_EQ(FuseAttention(&a.g, testing::AnyKernel, false), 1);
    for (const char* op : {"MatMul", "Add", "Softmax"}) EXPECT_EQ(CountOps(a.g, op), 0) << op;
    const Node* f = testing::FirstOp(a.g, "FusedAttention");
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->domain, "kaiwu");
    // the mask found on either side; Q and K read before their Muls by the constant scalar
    EXPECT_EQ(f->inputs, (std::vector<int>{a.qt, a.kt, a.v, a.mask, a.scale, a.scale}));
    EXPECT_EQ(CountOps(a.g, "Mul"), 0);
    EXPECT_EQ(f->outputs, std::vector<int>{a.y});
    EXPECT_EQ(f->GetInt("k_trans", 0), k_trans ? 1 : 0);
    EXPECT_EQ(a.g.values[a.y].producer, static_cast<int>(f - a.g.nodes.data()));
  }
  Attention scaled(true, -1, true, false, ValueKind::kConstant);  // (Q K) / 8 + mask
  ASSERT_EQ(FuseAttention(&scaled.g, testing::AnyKernel, false), 1);
  EXPECT_EQ(CountOps(scaled.g, "Div"), 0);
  EXPECT_FLOAT_EQ(testing::FirstOp(scaled.g, "FusedAttention")->GetFloat("scale", 1.f), 0.125f);
  Attention plain(/*with_mask=*/false);
  ASSERT_EQ(FuseAttention(&plain.g, testing::AnyKernel, false), 1);
  EXPECT_EQ(testing::FirstOp(plain.g, "FusedAttention")->inputs,
            (std::vector<int>{plain.qt, plain.kt, plain.v, -1, plain.scale, plain.scale}));
}

// A half session's graph: values float16, the scale a Cast of the constant (folded as
// the Cast rounds it; the Cast goes with the Div); fused only where the backend has a
// float16 kernel and every operand is float16.
TEST(FuseAttention, HalfValuesUseTheirDTypeAndFoldACastScale) {
  const auto half_only = [](OpId, DType t) { return t == DType::kFloat16; };
  Attention a(true, -1, true, false, ValueKind::kConstant, /*half=*/true);
  ASSERT_EQ(FuseAttention(&a.g, half_only, false), 1);
  EXPECT_EQ(CountOps(a.g, "Div"), 0);
  EXPECT_EQ(CountOps(a.g, "Cast"), 0);
  EXPECT_FLOAT_EQ(testing::FirstOp(a.g, "FusedAttention")->GetFloat("scale", 1.f), 0.125f);

  Attention fp32(true, -1, true, false, ValueKind::kConstant);  // float32 values: no float16 kernel fits
  EXPECT_EQ(FuseAttention(&fp32.g, half_only, false), 0);
  EXPECT_EQ(CountOps(fp32.g, "Softmax"), 1);

  Attention mixed(true, -1, true, false, ValueKind::kInput, /*half=*/true);  // a float32 mask
  mixed.g.values[mixed.mask].dtype = DType::kFloat32;
  EXPECT_EQ(FuseAttention(&mixed.g, testing::AnyKernel, false), 0);
}

// Q's Mul stays where its factor is a weight (a refit may change it) or where the
// scaled Q has another reader; K's still folds.
TEST(FuseAttention, QScaleFoldsOnlyWhenPlanKnownAndSoleReader) {
  {
    Attention a;
    a.g.values[a.scale].kind = ValueKind::kWeight;
    ASSERT_EQ(FuseAttention(&a.g, testing::AnyKernel, false), 1);
    const Node* f = testing::FirstOp(a.g, "FusedAttention");
    EXPECT_EQ(f->inputs, (std::vector<int>{a.q, a.k, a.v, a.mask}));
    EXPECT_EQ(CountOps(a.g, "Mul"), 2);
  }
  {
    Attention a;
    const int other = a.g.AddValue(Value{"other"});
    a.g.AddNode(GraphOp("Relu", {a.q}, {other}));
    a.g.outputs.push_back(other);
    ASSERT_EQ(FuseAttention(&a.g, testing::AnyKernel, false), 1);
    const Node* f = testing::FirstOp(a.g, "FusedAttention");
    EXPECT_EQ(f->inputs, (std::vector<int>{a.q, a.kt, a.v, a.mask, -1, a.scale}));
    EXPECT_EQ(CountOps(a.g, "Mul"), 1);
  }
}

// A Transpose of Y keeping the last axis last folds into the node (y_perm); one
// moving it stays.
TEST(FuseAttention, FoldsATransposeOfTheOutput) {
  for (bool last_kept : {true, false}) {
    Attention a;
    const int yt = a.g.AddValue(Value{"yt"});
    Node t = GraphOp("Transpose", {a.y}, {yt});
    t.attrs["perm"] = IntsAttr(last_kept ? std::vector<int64_t>{2, 0, 1, 3} : std::vector<int64_t>{0, 1, 3, 2});
    a.g.AddNode(t);
    a.g.outputs = {yt};
    a.g.Verify();
    ASSERT_EQ(FuseAttention(&a.g, testing::AnyKernel, false), 1);
    const Node* f = testing::FirstOp(a.g, "FusedAttention");
    EXPECT_EQ(CountOps(a.g, "Transpose"), last_kept ? 3 : 4) << last_kept;  // q, k, v's stay
    EXPECT_EQ(f->outputs, std::vector<int>{last_kept ? yt : a.y});
    if (last_kept) EXPECT_EQ(f->GetInts("y_perm"), (std::vector<int64_t>{2, 0, 1, 3}));
    else EXPECT_FALSE(f->Has("y_perm"));
  }
}

// With views: Q, K and V are Transposes of x (read only there), so the node also
// takes x as inputs 6-8 with each Transpose as a recipe; the Transposes stay
// (a plan drops them where it reads through the views).
TEST(FuseAttention, RecordsTheLayoutOpsOfQKAndVAsViews) {
  Attention a;
  ASSERT_EQ(FuseAttention(&a.g, testing::AnyKernel, true), 1);
  const Node* f = testing::FirstOp(a.g, "FusedAttention");
  ASSERT_EQ(f->inputs.size(), 9u);
  EXPECT_EQ(f->inputs, (std::vector<int>{a.qt, a.kt, a.v, a.mask, a.scale, a.scale, a.x, a.x, a.x}));
  EXPECT_EQ(f->GetInts("q_view"), (std::vector<int64_t>{1, 4, 0, 2, 1, 3}));
  EXPECT_EQ(f->GetInts("k_view"), (std::vector<int64_t>{1, 4, 0, 2, 3, 1}));
  EXPECT_EQ(f->GetInts("v_view"), (std::vector<int64_t>{1, 4, 0, 2, 1, 3}));
  EXPECT_EQ(CountOps(a.g, "Transpose"), 3);
  // A Transpose whose result another node reads is still part of a view (the
  // plan keeps its step for that reader); an op that is not a layout op ends one.
  Attention b;
  const int other = b.g.AddValue(Value{"other"});
  b.g.AddNode(GraphOp("Relu", {b.v}, {other}));
  b.g.outputs.push_back(other);
  ASSERT_EQ(FuseAttention(&b.g, testing::AnyKernel, true), 1);
  const Node* fb = testing::FirstOp(b.g, "FusedAttention");
  EXPECT_EQ(fb->inputs[8], b.x);
  EXPECT_EQ(CountOps(b.g, "Transpose"), 3);
  Attention c(true, -1, /*shaped=*/false);  // x -> Identity -> q: Identity is no layout op here
  c.g.values[c.x].has_shape = true;
  c.g.values[c.x].dims.assign(4, Dim{-1, "d"});
  ASSERT_EQ(FuseAttention(&c.g, testing::AnyKernel, true), 1);
  EXPECT_FALSE(testing::FirstOp(c.g, "FusedAttention")->Has("q_view"));
}

// A second block whose Q is the first block's output: its rank comes through the
// first FusedAttention (the graph is walked in order, so that node is already made).
TEST(FuseAttention, ChainedBlocksBothFuse) {
  Attention a;
  Graph& g = a.g;
  auto rt = [&](const std::string& n) { return AddFloatValue(g, n, ValueKind::kRuntime); };
  const int s2 = rt("s2"), p2 = rt("p2"), y2 = rt("y2");
  g.AddNode(GraphOp("MatMul", {a.y, a.k}, {s2}));
  Node sm = GraphOp("Softmax", {s2}, {p2});
  sm.opset = 17;
  g.AddNode(sm);
  g.AddNode(GraphOp("MatMul", {p2, a.v}, {y2}));
  g.outputs = {y2};
  g.Verify();
  ASSERT_EQ(FuseAttention(&g, testing::AnyKernel, false), 2);
  EXPECT_EQ(CountOps(g, "FusedAttention"), 2);
  EXPECT_EQ(CountOps(g, "MatMul"), 0);
}

TEST(FuseAttention, LeavesAloneWhatIsNotThePattern) {
  {
    Attention a(true, /*axis=*/1);  // softmax over another axis
    EXPECT_EQ(FuseAttention(&a.g, testing::AnyKernel, false), 0);
  }
  {
    Attention a(true, -1, /*shaped=*/false);  // x's rank unknown, and Q is x * scale
    EXPECT_EQ(FuseAttention(&a.g, testing::AnyKernel, false), 0);
    EXPECT_EQ(CountOps(a.g, "MatMul"), 2);
  }
  {
    Attention a;  // the probabilities are also a graph output
    a.g.outputs.push_back(a.probs);
    EXPECT_EQ(FuseAttention(&a.g, testing::AnyKernel, false), 0);
  }
  {
    Attention a;  // the scores have a second reader
    const int other = a.g.AddValue(Value{"other"});
    a.g.AddNode(GraphOp("Relu", {a.scores}, {other}));
    a.g.outputs.push_back(other);
    EXPECT_EQ(FuseAttention(&a.g, testing::AnyKernel, false), 0);
  }
  {
    Attention a;  // a ReLU fused into the last MatMul (FusedAttention has no activation)
    for (Node& n : a.g.nodes)
      if (n.op_type == "MatMul" && n.outputs[0] == a.y) n.attrs["_kaiwu_act"] = testing::StrAttrOf("Relu");
    EXPECT_EQ(FuseAttention(&a.g, testing::AnyKernel, false), 0);
  }
  {
    Attention a(true, -1, true, false, ValueKind::kWeight);  // a scale a refit may change
    EXPECT_EQ(FuseAttention(&a.g, testing::AnyKernel, false), 0);
  }
  {
    Attention a;  // no kernel on this backend
    EXPECT_EQ(FuseAttention(&a.g, [](OpId, DType) { return false; }), 0);
    EXPECT_EQ(CountOps(a.g, "Softmax"), 1);
  }
}

}  // namespace
}  // namespace kaiwu
