// FuseMlp's wide layers (passes/fuse_mlp.h): dense layers over X of rank 3 as
// an imported policy has them after Optimize and the mixed-precision pass (a
// Gemm between fuse_matmul_add's Reshapes; MatMul + Add where X's rank is not
// known), grouped into one FusedMlp with the edge casts and the Reshapes
// folded, max_rows set; what stays apart. Numerics: tests/python/test_cuda_fused_mlp_rank3.py.
#include <gtest/gtest.h>

#include "passes/fuse_mlp.h"
#include "passes/mixed_precision.h"
#include "passes/pass_manager.h"
#include "passes/rewrite_util.h"
#include "graph_test_util.h"

namespace kaiwu {
namespace {

constexpr auto Count = testing::CountOps;
using testing::GraphOp;

int Val(Graph& g, const std::string& name, ValueKind kind, std::vector<int64_t> dims, bool shaped = true) {
  Value v;
  v.name = name;
  v.kind = kind;
  v.dtype = DType::kFloat32;
  v.has_shape = shaped;
  for (int64_t d : dims) v.dims.push_back(Dim{d, d < 0 ? "batch" : ""});
  if (kind == ValueKind::kWeight) {
    Shape s(dims.begin(), dims.end());
    v.data = std::make_shared<Tensor>(DType::kFloat32, s);
  }
  return g.AddValue(v);
}

// x [batch, 5, 37] -> MatMul W1 [37, 19] -> Add B1 -> Relu -> MatMul W2 [19, 7]
// -> Add (B2 first) -> y; with `shaped_x` false x's rank is unknown; without
// `relu` the first Add feeds the second MatMul.
struct Encoder {
  Graph g;
  int x, y, w1, w2, mm2;
  explicit Encoder(bool shaped_x = true, bool relu = true) {
    g.opset = 17;
    x = Val(g, "x", ValueKind::kInput, {-1, 5, 37}, shaped_x);
    w1 = Val(g, "W1", ValueKind::kWeight, {37, 19});
    const int b1 = Val(g, "B1", ValueKind::kWeight, {19});
    w2 = Val(g, "W2", ValueKind::kWeight, {19, 7});
    const int b2 = Val(g, "B2", ValueKind::kWeight, {7});
    auto rt = [&](const std::string& n) { return Val(g, n, ValueKind::kRuntime, {}, false); };
    const int m1 = rt("m1"), a1 = rt("a1"), r1 = rt("r1");
    mm2 = rt("m2");
    y = rt("y");
    g.values[y].dtype = DType::kFloat32;
    g.inputs = {x};
    g.outputs = {y};
    g.AddNode(GraphOp("MatMul", {x, w1}, {m1}));
    g.AddNode(GraphOp("Add", {m1, b1}, {a1}));
    if (relu) g.AddNode(GraphOp("Relu", {a1}, {r1}));
    g.AddNode(GraphOp("MatMul", {relu ? r1 : a1, w2}, {mm2}));
    g.AddNode(GraphOp("Add", {b2, mm2}, {y}));
    g.Verify();
  }
  // As a half-precision device session prepares it, before FuseMlp.
  void Prepare() {
    PassStats stats;
    Optimize(&g, &stats);
    MixedPrecisionOptions o;
    o.has_kernel = [](OpId, DType) { return true; };
    ApplyMixedPrecision(&g, o);
    g.RemoveDeadNodes();
  }
};

TEST(FuseMlpRank3, EncoderOverASequenceBecomesOneNodeWithReshapesAndCastsFolded) {
  Encoder e;
  e.Prepare();
  ASSERT_EQ(Count(e.g, "Gemm"), 1);    // fuse_matmul_add's, between two Reshapes
  ASSERT_EQ(Count(e.g, "MatMul"), 1);  // its output's rank is not known: MatMul + Add
  ASSERT_EQ(FuseMlp(&e.g, testing::AnyKernel), 1);
  e.g.Verify();
  const Node* f = testing::FirstOp(e.g, "FusedMlp");
  ASSERT_NE(f, nullptr);
  for (const char* op : {"Gemm", "MatMul", "Add", "Reshape", "Shape", "Slice", "Concat", "Relu"})
    EXPECT_EQ(Count(e.g, op), 0) << op;
  for (const Node& n : e.g.nodes)  // what is left: the weights' casts to half
    if (n.op_type == "Cast") EXPECT_EQ(e.g.values[n.inputs[0]].kind, ValueKind::kWeight) << n.name;
  EXPECT_EQ(f->inputs[0], e.x);  // float32 X of rank 3, read as it is
  EXPECT_EQ(f->outputs, std::vector<int>{e.y});
  EXPECT_EQ(f->GetInts("output_dtypes"), std::vector<int64_t>{1});
  EXPECT_EQ(f->GetInts("layer_inputs"), (std::vector<int64_t>{-1, 0}));
  EXPECT_EQ(f->GetInts("layer_trans_b"), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(f->attrs.at("layer_acts").strings, (std::vector<std::string>{"Relu", ""}));
  EXPECT_EQ(f->GetInt("max_rows", -1), kFusedMlpWideMaxRows);
  EXPECT_EQ(e.g.values[f->inputs[1]].dims[1].value, 19);
  EXPECT_EQ(e.g.values[f->inputs[3]].dims[1].value, 7);
}

// One wide layer alone (an attention projection): still one node, with the lower
// row limit of one-layer groups (past it: one GEMM and its bias epilogue).
TEST(FuseMlpRank3, OneWideLayerGetsTheOneLayerRowLimit) {
  Graph g;
  g.opset = 17;
  const int x = Val(g, "x", ValueKind::kInput, {-1, 5, 37});
  const int w = Val(g, "W", ValueKind::kWeight, {37, 19});
  const int b = Val(g, "B", ValueKind::kWeight, {19});
  const int m = Val(g, "m", ValueKind::kRuntime, {}, false), y = Val(g, "y", ValueKind::kRuntime, {}, false);
  g.inputs = {x};
  g.outputs = {y};
  g.AddNode(GraphOp("MatMul", {x, w}, {m}));
  g.AddNode(GraphOp("Add", {m, b}, {y}));
  g.Verify();
  PassStats stats;
  Optimize(&g, &stats);
  MixedPrecisionOptions o;
  o.has_kernel = testing::AnyKernel;
  ApplyMixedPrecision(&g, o);
  g.RemoveDeadNodes();
  ASSERT_EQ(FuseMlp(&g, testing::AnyKernel), 1);
  g.Verify();
  const Node* f = testing::FirstOp(g, "FusedMlp");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->GetInts("layer_inputs"), std::vector<int64_t>{-1});
  EXPECT_EQ(f->GetInt("max_rows", -1), kFusedMlpWideSingleMaxRows);
  EXPECT_LT(kFusedMlpWideSingleMaxRows, kFusedMlpWideMaxRows);
}

TEST(FuseMlpRank3, UnknownRankMatMulAddIsALayerAndTheSwitchKeepsTheOldGraph) {
  {
    Encoder e(/*shaped_x=*/false, /*relu=*/false);  // fuse_matmul_add leaves both MatMul + Add
    e.Prepare();
    ASSERT_EQ(Count(e.g, "MatMul"), 2);
    ASSERT_EQ(FuseMlp(&e.g, testing::AnyKernel), 1);
    const Node* f = testing::FirstOp(e.g, "FusedMlp");
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->inputs[0], e.x);
    EXPECT_EQ(f->outputs, std::vector<int>{e.y});
    EXPECT_EQ(f->GetInts("layer_inputs"), (std::vector<int64_t>{-1, 0}));
    EXPECT_EQ(f->attrs.at("layer_acts").strings, (std::vector<std::string>{"", ""}));
    EXPECT_EQ(Count(e.g, "MatMul") + Count(e.g, "Add"), 0);
  }
  {
    Encoder e;
    e.Prepare();
    const size_t nodes = e.g.nodes.size();
    EXPECT_EQ(FuseMlp(&e.g, testing::AnyKernel, /*wide=*/false), 0);
    EXPECT_EQ(e.g.nodes.size(), nodes);
    EXPECT_EQ(Count(e.g, "Gemm"), 1);
    EXPECT_EQ(Count(e.g, "Reshape"), 2);
  }
}

TEST(FuseMlpRank3, LeavesAloneWhatIsNotADenseLayer) {
  {
    Encoder e(false);
    // Add + Relu become one FusedElementwise: the first MatMul stays, the second layer alone fuses.
    e.Prepare();
    ASSERT_EQ(FuseMlp(&e.g, testing::AnyKernel), 1);
    EXPECT_EQ(Count(e.g, "MatMul"), 1);
    EXPECT_EQ(Count(e.g, "FusedElementwise"), 1);
    EXPECT_EQ(testing::FirstOp(e.g, "FusedMlp")->outputs, std::vector<int>{e.y});
  }
  {
    Encoder e(false, false);
    // The second MatMul's product is read by a node besides its Add: it stays.
    const int extra = AddIntermediate(&e.g, "extra");
    e.g.AddNode(GraphOp("Neg", {e.mm2}, {extra}));
    e.g.outputs.push_back(extra);
    e.Prepare();
    ASSERT_EQ(FuseMlp(&e.g, testing::AnyKernel), 1);  // the first layer alone
    EXPECT_EQ(Count(e.g, "MatMul"), 1);
    EXPECT_EQ(Count(e.g, "FusedMlp"), 1);
  }
  {
    Encoder e(false, false);
    // The second weight is fed at run time: a MatMul of two runtime values.
    e.g.values[e.w2].kind = ValueKind::kInput;
    e.g.values[e.w2].data.reset();
    e.g.inputs.push_back(e.w2);
    e.Prepare();
    ASSERT_EQ(FuseMlp(&e.g, testing::AnyKernel), 1);
    EXPECT_EQ(Count(e.g, "MatMul"), 1);
  }
  {
    Encoder e;  // no FusedMlp kernel on this backend
    e.Prepare();
    EXPECT_EQ(FuseMlp(&e.g, [](OpId, DType) { return false; }), 0);
    EXPECT_EQ(Count(e.g, "Gemm"), 1);
  }
}

}  // namespace
}  // namespace kaiwu
