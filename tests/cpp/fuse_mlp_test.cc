// Structure of the FuseMlp rewrite (passes/fuse_mlp.h) on hand-built graphs as
// the mixed-precision pass leaves a policy MLP: which Gemms become one
// FusedMlp node, its attributes, the casts folded at the edges, and what is
// left alone. Numerics: tests/cpp/cuda/fused_mlp_test.cc and the fp16
// policies against onnxruntime (tests/python/test_precision.py).
#include <gtest/gtest.h>

#include "passes/fuse_mlp.h"
#include "passes/rewrite_util.h"
#include "graph_test_util.h"

namespace kaiwu {
namespace {

constexpr auto Count = testing::CountOps;

// Weights and inputs carry shapes; intermediate (runtime) values do not, as
// in an imported graph before plan-time shape inference.
int Val(Graph& g, const std::string& name, ValueKind kind, DType dtype, std::vector<int64_t> dims) {
  Value v;
  v.name = name;
  v.kind = kind;
  v.dtype = dtype;
  v.has_shape = kind != ValueKind::kRuntime;
  for (int64_t d : dims) v.dims.push_back(Dim{d, d < 0 ? "batch" : ""});
  if (kind == ValueKind::kWeight) {
    Shape s;
    for (int64_t d : dims) s.push_back(d);
    v.data = std::make_shared<Tensor>(dtype, s);
  }
  return g.AddValue(v);
}

Attribute Str(const std::string& s) {
  Attribute a;
  a.kind = Attribute::Kind::kString;
  a.s = s;
  return a;
}

// obs(f32) -> Cast(f16) -> Gemm 64->h Tanh -> Gemm h->h Tanh -> {Gemm pi, Gemm v}
// -> Cast(f32) each -> logits, value. `hidden` sets h; `runtime_w2` makes the
// second layer's weight a graph input.
struct Mlp {
  Graph g;
  int obs, logits, value, h2;
  explicit Mlp(int64_t hidden = 256, bool runtime_w2 = false) {
    const DType h = DType::kFloat16;
    obs = Val(g, "obs", ValueKind::kInput, DType::kFloat32, {-1, 64});
    g.inputs = {obs};
    const int x = Val(g, "obs/fp16", ValueKind::kRuntime, h, {-1, 64});
    Node cast;
    cast.op_type = "Cast";
    cast.name = "obs/cast";
    cast.inputs = {obs};
    cast.outputs = {x};
    cast.attrs["to"] = IntAttr(10);
    g.AddNode(cast);
    auto gemm = [&](const std::string& name, int a, int64_t k, int64_t n, const std::string& act,
                    bool runtime_w) {
      const int w = Val(g, name + ".W", runtime_w ? ValueKind::kInput : ValueKind::kWeight, h, {n, k});
      if (runtime_w) g.inputs.push_back(w);
      const int b = Val(g, name + ".B", ValueKind::kWeight, h, {n});
      const int y = Val(g, name + ".Y", ValueKind::kRuntime, h, {-1, n});
      Node node;
      node.op_type = "Gemm";
      node.name = name;
      node.inputs = {a, w, b};
      node.outputs = {y};
      node.attrs["transB"] = IntAttr(1);
      if (!act.empty()) node.attrs["_kaiwu_act"] = Str(act);
      g.AddNode(node);
      return y;
    };
    const int h1 = gemm("body0", x, 64, hidden, "Tanh", false);
    h2 = gemm("body2", h1, hidden, hidden, "Tanh", runtime_w2);
    const int pi = gemm("pi", h2, hidden, 18, "", false);
    const int v = gemm("v", h2, hidden, 1, "", false);
    logits = Val(g, "logits", ValueKind::kRuntime, DType::kFloat32, {-1, 18});
    value = Val(g, "value", ValueKind::kRuntime, DType::kFloat32, {-1, 1});
    for (auto [from, to] : {std::pair<int, int>{pi, logits}, {v, value}}) {
      Node c;
      c.op_type = "Cast";
      c.name = g.values[to].name + "/cast";
      c.inputs = {from};
      c.outputs = {to};
      c.attrs["to"] = IntAttr(1);
      g.AddNode(c);
    }
    g.outputs = {logits, value};
    g.Verify();
  }
};

TEST(FuseMlp, PolicyBodyAndHeadsBecomeOneNodeWithTheCastsFolded) {
  Mlp p;
  ASSERT_EQ(FuseMlp(&p.g, testing::AnyKernel), 1);
  ASSERT_EQ(p.g.nodes.size(), 1u);
  const Node& f = p.g.nodes[0];
  EXPECT_EQ(f.op_type, "FusedMlp");
  EXPECT_EQ(f.domain, "kaiwu");
  ASSERT_EQ(f.inputs.size(), 9u);
  EXPECT_EQ(f.inputs[0], p.obs);  // the float32 observation, its Cast folded
  EXPECT_EQ(f.outputs, (std::vector<int>{p.logits, p.value}));
  EXPECT_EQ(f.GetInts("layer_inputs"), (std::vector<int64_t>{-1, 0, 1, 1}));
  EXPECT_EQ(f.GetInts("layer_trans_b"), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(f.attrs.at("layer_acts").strings, (std::vector<std::string>{"Tanh", "Tanh", "", ""}));
  EXPECT_EQ(f.GetInts("output_layers"), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.GetInts("output_dtypes"), (std::vector<int64_t>{1, 1}));
  for (int k = 1; k < 9; ++k) EXPECT_EQ(p.g.values[f.inputs[k]].kind, ValueKind::kWeight) << k;
}

TEST(FuseMlp, AnOutputReadOutsideStaysAnOutputInHalf) {
  Mlp p;
  // A node outside the group also reads the body's output.
  const int extra = AddIntermediate(&p.g, "extra");
  p.g.values[extra].dtype = DType::kFloat16;
  Node relu;
  relu.op_type = "Relu";
  relu.name = "outside";
  relu.inputs = {p.h2};
  relu.outputs = {extra};
  p.g.AddNode(relu);
  p.g.outputs.push_back(extra);
  p.g.Verify();
  ASSERT_EQ(FuseMlp(&p.g, testing::AnyKernel), 1);
  const Node* f = nullptr;
  for (const Node& n : p.g.nodes)
    if (n.op_type == "FusedMlp") f = &n;
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->GetInts("output_layers"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(f->GetInts("output_dtypes"), (std::vector<int64_t>{10, 1, 1}));
  EXPECT_EQ(f->outputs[0], p.h2);
  EXPECT_EQ(Count(p.g, "Relu"), 1);
}

TEST(FuseMlp, LeavesAloneWhatItCannotFuse) {
  {
    Mlp p;  // no kernel on this backend
    EXPECT_EQ(FuseMlp(&p.g, [](OpId, DType) { return false; }), 0);
    EXPECT_EQ(Count(p.g, "Gemm"), 4);
  }
  {
    Mlp p(2048);  // wider than kFusedMlpMaxWidth: every layer touching it stays
    EXPECT_EQ(FuseMlp(&p.g, testing::AnyKernel), 0);
    EXPECT_EQ(Count(p.g, "Gemm"), 4);
  }
  {
    Mlp p(256, /*runtime_w2=*/true);  // body2's weight is fed: the group splits around it
    EXPECT_EQ(FuseMlp(&p.g, testing::AnyKernel), 1);
    EXPECT_EQ(Count(p.g, "Gemm"), 2);  // body0 alone (one layer) and body2 stay
    EXPECT_EQ(Count(p.g, "FusedMlp"), 1);  // the heads
    EXPECT_EQ(Count(p.g, "Cast"), 1);      // the observation's
  }
}

}  // namespace
}  // namespace kaiwu
