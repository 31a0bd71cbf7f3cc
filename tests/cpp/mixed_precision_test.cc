// Structure of the mixed-precision rewrite (passes/mixed_precision.h) on
// hand-built policy graphs: which nodes run in half, where Casts go, that
// weights are cast by static nodes, that graph inputs/outputs keep their
// dtypes. Numerics are checked on the GPU (tests/python/test_cuda.py).
#include <gtest/gtest.h>

#include <set>

#include "passes/mixed_precision.h"
#include "passes/rewrite_util.h"

namespace kaiwu {
namespace {

int Val(Graph& g, const std::string& name, ValueKind kind, DType dtype = DType::kUndefined) {
  Value v;
  v.name = name;
  v.kind = kind;
  v.dtype = dtype;
  if (kind == ValueKind::kWeight || kind == ValueKind::kConstant) {
    v.data = std::make_shared<Tensor>(dtype, Shape{1});
    v.has_shape = true;
    v.dims = {Dim{1, ""}};
  }
  return g.AddValue(v);
}

Node Op(const std::string& op, const std::string& name, std::vector<int> in, std::vector<int> out) {
  Node n;
  n.op_type = op;
  n.name = name;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

// obs(u8) -> Cast(float) -> Div(255) -> Conv(W, B) -> Relu -> Flatten -> Gemm(W2, B2)
// -> logits (output) -> Softmax -> probs (output)
struct Policy {
  Graph g;
  int obs, logits, probs, w, w2;
  Policy() {
    obs = Val(g, "obs", ValueKind::kInput, DType::kUInt8);
    g.inputs = {obs};
    const int k255 = Val(g, "k255", ValueKind::kConstant, DType::kFloat32);
    w = Val(g, "W", ValueKind::kWeight, DType::kFloat32);
    const int b = Val(g, "B", ValueKind::kWeight, DType::kFloat32);
    w2 = Val(g, "W2", ValueKind::kWeight, DType::kFloat32);
    const int b2 = Val(g, "B2", ValueKind::kWeight, DType::kFloat32);
    const int f = Val(g, "f", ValueKind::kRuntime), x = Val(g, "x", ValueKind::kRuntime);
    const int c = Val(g, "c", ValueKind::kRuntime), r = Val(g, "r", ValueKind::kRuntime);
    const int fl = Val(g, "fl", ValueKind::kRuntime);
    logits = Val(g, "logits", ValueKind::kRuntime);
    probs = Val(g, "probs", ValueKind::kRuntime);
    Node cast = Op("Cast", "to_float", {obs}, {f});
    cast.attrs["to"] = IntAttr(1);
    g.AddNode(cast);
    g.AddNode(Op("Div", "scale", {f, k255}, {x}));
    g.AddNode(Op("Conv", "conv", {x, w, b}, {c}));
    g.AddNode(Op("Relu", "relu", {c}, {r}));
    g.AddNode(Op("Flatten", "flatten", {r}, {fl}));
    g.AddNode(Op("Gemm", "head", {fl, w2, b2}, {logits}));
    g.AddNode(Op("Softmax", "softmax", {logits}, {probs}));
    g.outputs = {logits, probs};
    g.Verify();
  }
};

MixedPrecisionOptions Options(DType half = DType::kFloat16, std::vector<std::string> keep = {},
                              std::set<std::string> missing = {}) {
  MixedPrecisionOptions o;
  o.half = half;
  o.keep_fp32 = std::move(keep);
  o.has_kernel = [missing](OpId op, DType) { return !missing.count(OpName(op)); };
  return o;
}

const MixedPrecisionReport::Entry* Find(const MixedPrecisionReport& r, const std::string& node) {
  for (const auto& e : r.nodes)
    if (e.node == node) return &e;
  return nullptr;
}

const Node* ProducerOf(const Graph& g, int v) {
  for (const Node& n : g.nodes)
    for (int o : n.outputs)
      if (o == v) return &n;
  return nullptr;
}

const Node* NodeNamed(const Graph& g, const std::string& name) {
  for (const Node& n : g.nodes)
    if (n.name == name) return &n;
  return nullptr;
}

TEST(MixedPrecision, PolicyRunsInHalfWithCastsAtTheEdges) {
  Policy p;
  MixedPrecisionReport r = ApplyMixedPrecision(&p.g, Options());
  for (const char* n : {"scale", "conv", "relu", "flatten", "head"}) {
    ASSERT_NE(Find(r, n), nullptr) << n;
    EXPECT_TRUE(Find(r, n)->half) << n;
  }
  ASSERT_NE(Find(r, "softmax"), nullptr);
  EXPECT_FALSE(Find(r, "softmax")->half);
  EXPECT_EQ(Find(r, "softmax")->reason, "float32 by rule");
  EXPECT_EQ(r.half_nodes(), 5);

  // Every half node reads and writes float16 values.
  for (const char* n : {"conv", "relu", "flatten", "head"}) {
    const Node* node = NodeNamed(p.g, n);
    ASSERT_NE(node, nullptr);
    EXPECT_EQ(p.g.values[node->outputs[0]].dtype, DType::kFloat16) << n;
    EXPECT_EQ(p.g.values[node->inputs[0]].dtype, DType::kFloat16) << n;
  }
  // Weights reach Conv and Gemm through Casts of the weights themselves (static nodes).
  for (const char* n : {"conv", "head"}) {
    const Node* node = NodeNamed(p.g, n);
    for (int k = 1; k < 3; ++k) {
      const Node* c = ProducerOf(p.g, node->inputs[k]);
      ASSERT_NE(c, nullptr);
      EXPECT_EQ(c->op_type, "Cast");
      EXPECT_EQ(c->GetInt("to", 0), 10);
      EXPECT_EQ(p.g.values[c->inputs[0]].kind, ValueKind::kWeight);
    }
  }
  std::vector<bool> st = StaticValues(p.g);
  EXPECT_TRUE(st[NodeNamed(p.g, "conv")->inputs[1]]);
  // uint8 observations are cast to float16 once, without the float32 step.
  const Node* first = ProducerOf(p.g, NodeNamed(p.g, "scale")->inputs[0]);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->op_type, "Cast");
  EXPECT_EQ(first->inputs[0], p.obs);
  EXPECT_EQ(NodeNamed(p.g, "to_float"), nullptr);
  // Outputs keep their ids and float32: logits by a Cast back, probs by Softmax.
  EXPECT_EQ(p.g.outputs, (std::vector<int>{p.logits, p.probs}));
  const Node* back = ProducerOf(p.g, p.logits);
  ASSERT_NE(back, nullptr);
  EXPECT_EQ(back->op_type, "Cast");
  EXPECT_EQ(back->GetInt("to", 0), 1);
  EXPECT_EQ(NodeNamed(p.g, "softmax")->inputs[0], p.logits);
  EXPECT_EQ(r.casts, 7);  // obs, 255, W, B, W2, B2 in; logits out
}

TEST(MixedPrecision, BFloat16CastsToCode16) {
  Policy p;
  ApplyMixedPrecision(&p.g, Options(DType::kBFloat16));
  const Node* c = ProducerOf(p.g, NodeNamed(p.g, "conv")->inputs[1]);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->GetInt("to", 0), 16);
  EXPECT_EQ(p.g.values[NodeNamed(p.g, "conv")->outputs[0]].dtype, DType::kBFloat16);
}

TEST(MixedPrecision, KeepFp32ByNameOrOpType) {
  Policy p;
  MixedPrecisionReport r = ApplyMixedPrecision(&p.g, Options(DType::kFloat16, {"head", "Relu"}));
  EXPECT_FALSE(Find(r, "head")->half);
  EXPECT_EQ(Find(r, "head")->reason, "keep_fp32");
  EXPECT_FALSE(Find(r, "relu")->half);
  EXPECT_TRUE(Find(r, "conv")->half);
  // relu reads conv's result back in float32; flatten only moves float32 data.
  const Node* relu = NodeNamed(p.g, "relu");
  EXPECT_EQ(ProducerOf(p.g, relu->inputs[0])->op_type, "Cast");
  EXPECT_FALSE(Find(r, "flatten")->half);
  EXPECT_EQ(Find(r, "flatten")->reason, "moves float32 data");
  EXPECT_EQ(NodeNamed(p.g, "head")->inputs[1], p.w2);  // float32 weights as they were
}

// obs -> MatMul 'enc' (W) -> GRU 'gru' (GW, GR; linear_before_reset `lbr`, R's
// dims [1, 3 hidden, hidden] when hidden > 0) -> Y -> MatMul 'head' (W2) -> out;
// graph outputs out and the GRU's Y_h.
struct EncoderGru {
  Graph g;
  int gw, gr, yh;
  explicit EncoderGru(int lbr = 0, int64_t hidden = 0) {
    const int obs = Val(g, "obs", ValueKind::kInput, DType::kFloat32);
    g.inputs = {obs};
    const int w = Val(g, "W", ValueKind::kWeight, DType::kFloat32);
    gw = Val(g, "GW", ValueKind::kWeight, DType::kFloat32);
    gr = Val(g, "GR", ValueKind::kWeight, DType::kFloat32);
    if (hidden > 0) g.values[gr].dims = {Dim{1, ""}, Dim{3 * hidden, ""}, Dim{hidden, ""}};
    const int w2 = Val(g, "W2", ValueKind::kWeight, DType::kFloat32);
    const int x = Val(g, "x", ValueKind::kRuntime, DType::kFloat32);
    const int y = Val(g, "y", ValueKind::kRuntime, DType::kFloat32);
    yh = Val(g, "y_h", ValueKind::kRuntime, DType::kFloat32);
    const int out = Val(g, "out", ValueKind::kRuntime, DType::kFloat32);
    g.AddNode(Op("MatMul", "enc", {obs, w}, {x}));
    Node gru = Op("GRU", "gru", {x, gw, gr}, {y, yh});
    if (lbr) gru.attrs["linear_before_reset"] = IntAttr(lbr);
    g.AddNode(gru);
    g.AddNode(Op("MatMul", "head", {y, w2}, {out}));
    g.outputs = {out, yh};
    g.Verify();
  }
};

// Gemm -> GRU -> Gemm: the GRU keeps float32 state and gate math with its
// GEMMs marked for TF32. With a half GRU kernel it reads the half X that enc
// makes and W through a static Cast, and writes Y in half for the head (no
// activation-sized cast either side; R stays float32); without one, X and Y
// are float32 with casts around it. keep_fp32 (by name or op type) keeps
// plain float32 GEMMs.
TEST(MixedPrecision, RecurrentNodesKeepFloat32WithTf32Gemms) {
  struct Case {
    std::vector<std::string> keep;
    std::set<std::string> missing;
  };
  for (const Case& c : std::vector<Case>{{{}, {}}, {{}, {"GRU"}}, {{"gru"}, {}}, {{"GRU"}, {}}}) {
    const std::string what = c.keep.empty() ? (c.missing.empty() ? "half GRU kernel" : "no half GRU kernel")
                                            : "keep " + c.keep[0];
    EncoderGru p;
    Graph& g = p.g;
    const int gw = p.gw, gr = p.gr, yh = p.yh;
    MixedPrecisionReport r = ApplyMixedPrecision(&g, Options(DType::kFloat16, c.keep, c.missing));
    const Node* gru = NodeNamed(g, "gru");
    ASSERT_NE(gru, nullptr) << what;
    ASSERT_NE(Find(r, "gru"), nullptr) << what;
    EXPECT_FALSE(Find(r, "gru")->half) << what;
    EXPECT_TRUE(Find(r, "enc")->half) << what;
    EXPECT_TRUE(Find(r, "head")->half) << what;
    EXPECT_EQ(gru->inputs[2], gr) << what;           // R as the model has it
    EXPECT_EQ(gru->outputs[1], yh) << what;          // Y_h float32, a graph output
    const Node* enc = NodeNamed(g, "enc");
    const Node* head = NodeNamed(g, "head");
    if (c.keep.empty() && c.missing.empty()) {
      EXPECT_TRUE(gru->tf32_gemms);
      EXPECT_EQ(Find(r, "gru")->reason, "float32 by rule, GEMMs on tensor cores, X, W and Y in float16");
      EXPECT_EQ(gru->inputs[0], enc->outputs[0]);  // enc's half result, no cast
      EXPECT_EQ(g.values[gru->inputs[0]].dtype, DType::kFloat16);
      const Node* w_cast = ProducerOf(g, gru->inputs[1]);
      ASSERT_NE(w_cast, nullptr);
      EXPECT_EQ(w_cast->op_type, "Cast");
      EXPECT_EQ(w_cast->inputs[0], gw);
      EXPECT_EQ(g.values[gru->outputs[0]].dtype, DType::kFloat16);
      EXPECT_EQ(head->inputs[0], gru->outputs[0]);  // Y read in half, no cast
    } else {
      EXPECT_EQ(g.values[gru->inputs[0]].dtype, DType::kFloat32) << what;
      EXPECT_EQ(gru->inputs[1], gw) << what;
      EXPECT_EQ(g.values[gru->outputs[0]].dtype, DType::kFloat32) << what;
      EXPECT_EQ(ProducerOf(g, gru->inputs[0])->op_type, "Cast") << what;
      if (c.keep.empty()) {
        EXPECT_TRUE(gru->tf32_gemms);
        EXPECT_EQ(Find(r, "gru")->reason, "float32 by rule, GEMMs on tensor cores");
      } else {
        EXPECT_FALSE(gru->tf32_gemms) << what;
        EXPECT_EQ(Find(r, "gru")->reason, "keep_fp32") << what;
      }
    }
  }
}

// A GRU with linear_before_reset and hidden <= 128, a multiple of 16, also
// reads R in float16 in fp16 sessions (a static Cast, like W): hidden 32 does,
// hidden 40, linear_before_reset 0 and bfloat16 sessions keep R float32.
TEST(MixedPrecision, GruTakesFloat16RWhereItsSequenceKernelReadsIt) {
  struct Case {
    int64_t hidden;
    int lbr;
    DType half;
    bool half_r;
  };
  for (const Case& c : {Case{32, 1, DType::kFloat16, true}, Case{40, 1, DType::kFloat16, false},
                        Case{32, 0, DType::kFloat16, false}, Case{32, 1, DType::kBFloat16, false}}) {
    const std::string what = "hidden " + std::to_string(c.hidden) + " lbr " + std::to_string(c.lbr) + " " +
                             DTypeName(c.half);
    EncoderGru p(c.lbr, c.hidden);
    Graph& g = p.g;
    const int gr = p.gr;
    MixedPrecisionReport r = ApplyMixedPrecision(&g, Options(c.half));
    const Node* n = NodeNamed(g, "gru");
    ASSERT_NE(n, nullptr) << what;
    EXPECT_EQ(g.values[n->inputs[0]].dtype, c.half) << what;  // X and W in half in every case
    if (c.half_r) {
      const Node* cast = ProducerOf(g, n->inputs[2]);
      ASSERT_NE(cast, nullptr) << what;
      EXPECT_EQ(cast->op_type, "Cast") << what;
      EXPECT_EQ(cast->inputs[0], gr) << what;
      EXPECT_EQ(g.values[n->inputs[2]].dtype, DType::kFloat16) << what;
      EXPECT_EQ(Find(r, "gru")->reason, "float32 by rule, GEMMs on tensor cores, X, W, R and Y in float16");
    } else {
      EXPECT_EQ(n->inputs[2], gr) << what;
      EXPECT_EQ(Find(r, "gru")->reason,
                std::string("float32 by rule, GEMMs on tensor cores, X, W and Y in ") + DTypeName(c.half))
          << what;
    }
  }
}

TEST(MixedPrecision, MissingKernelKeepsFloat32) {
  Policy p;
  MixedPrecisionReport r = ApplyMixedPrecision(&p.g, Options(DType::kFloat16, {}, {"Conv"}));
  EXPECT_FALSE(Find(r, "conv")->half);
  EXPECT_EQ(Find(r, "conv")->reason, "no float16 kernel");
  EXPECT_EQ(NodeNamed(p.g, "conv")->inputs[1], p.w);
  EXPECT_TRUE(Find(r, "relu")->half);
}

TEST(MixedPrecision, NodesOverWeightsOnlyStayFloat32) {
  Graph g;
  const int x = Val(g, "x", ValueKind::kInput, DType::kFloat32);
  const int a = Val(g, "A", ValueKind::kWeight, DType::kFloat32);
  const int b = Val(g, "B", ValueKind::kWeight, DType::kFloat32);
  const int ab = Val(g, "ab", ValueKind::kRuntime), y = Val(g, "y", ValueKind::kRuntime);
  g.inputs = {x};
  g.AddNode(Op("MatMul", "fold", {a, b}, {ab}));
  g.AddNode(Op("MatMul", "run", {x, ab}, {y}));
  g.outputs = {y};
  g.Verify();
  MixedPrecisionReport r = ApplyMixedPrecision(&g, Options());
  EXPECT_FALSE(Find(r, "fold")->half);
  EXPECT_EQ(Find(r, "fold")->reason, "computed from weights at load");
  EXPECT_TRUE(Find(r, "run")->half);
  EXPECT_EQ(ProducerOf(g, y)->op_type, "Cast");
}

TEST(MixedPrecision, IntegerValuesAreNeverCast) {
  Graph g;
  const int x = Val(g, "x", ValueKind::kInput, DType::kFloat32);
  const int idx = Val(g, "idx", ValueKind::kInput, DType::kInt64);
  const int s = Val(g, "s", ValueKind::kRuntime), y = Val(g, "y", ValueKind::kRuntime);
  g.inputs = {x, idx};
  g.AddNode(Op("Relu", "relu", {x}, {s}));
  g.AddNode(Op("Gather", "gather", {s, idx}, {y}));
  g.outputs = {y};
  g.Verify();
  ApplyMixedPrecision(&g, Options());
  const Node* gather = NodeNamed(g, "gather");
  EXPECT_EQ(g.values[gather->inputs[0]].dtype, DType::kFloat16);
  EXPECT_EQ(gather->inputs[1], idx);  // indices untouched
  EXPECT_EQ(ProducerOf(g, y)->op_type, "Cast");
}

// Attention's scale as torch exports it: Shape(q) -> Slice -> Cast(float) -> Sqrt ->
// Div(1, .) -> Mul(q, .). The plan computes the scale on the host (float32 kernels)
// once per input shape, so those nodes stay float32; the Mul over q runs in half.
TEST(MixedPrecision, NodesOverShapesOnlyStayFloat32) {
  Graph g;
  const int x = Val(g, "x", ValueKind::kInput, DType::kFloat32);
  const int w = Val(g, "W", ValueKind::kWeight, DType::kFloat32);
  const int one = Val(g, "one", ValueKind::kConstant, DType::kFloat32);
  const int starts = Val(g, "starts", ValueKind::kConstant, DType::kInt64);
  const int ends = Val(g, "ends", ValueKind::kConstant, DType::kInt64);
  const int q = Val(g, "q", ValueKind::kRuntime), shape = Val(g, "shape", ValueKind::kRuntime, DType::kInt64);
  const int dim = Val(g, "dim", ValueKind::kRuntime, DType::kInt64);
  const int dimf = Val(g, "dimf", ValueKind::kRuntime, DType::kFloat32);
  const int root = Val(g, "root", ValueKind::kRuntime, DType::kFloat32);
  const int scale = Val(g, "scale", ValueKind::kRuntime, DType::kFloat32);
  const int y = Val(g, "y", ValueKind::kRuntime, DType::kFloat32);
  g.inputs = {x};
  g.AddNode(Op("MatMul", "q_proj", {x, w}, {q}));
  g.AddNode(Op("Shape", "shape", {q}, {shape}));
  g.AddNode(Op("Slice", "last_dim", {shape, starts, ends}, {dim}));
  Node cast = Op("Cast", "to_float", {dim}, {dimf});
  cast.attrs["to"] = IntAttr(1);
  g.AddNode(cast);
  Node sqrt = Op("FusedElementwise", "sqrt_fused", {dimf}, {root});
  sqrt.domain = "kaiwu";
  g.AddNode(sqrt);
  g.AddNode(Op("Div", "inverse", {one, root}, {scale}));
  g.AddNode(Op("Mul", "scale_q", {q, scale}, {y}));
  g.outputs = {y};
  g.Verify();
  MixedPrecisionReport r = ApplyMixedPrecision(&g, Options());
  for (const char* name : {"sqrt_fused", "inverse"}) {
    ASSERT_NE(Find(r, name), nullptr) << name;
    EXPECT_FALSE(Find(r, name)->half) << name;
    EXPECT_EQ(Find(r, name)->reason, "computed from shapes when planned") << name;
  }
  EXPECT_EQ(g.values[NodeNamed(g, "sqrt_fused")->inputs[0]].dtype, DType::kFloat32);
  EXPECT_TRUE(Find(r, "q_proj")->half);
  EXPECT_TRUE(Find(r, "scale_q")->half);
  EXPECT_EQ(g.values[NodeNamed(g, "scale_q")->inputs[0]].dtype, DType::kFloat16);
  // Shape reads q's half value: no float32 copy of q is made for it.
  EXPECT_EQ(NodeNamed(g, "shape")->inputs[0], NodeNamed(g, "scale_q")->inputs[0]);
  for (const Node& n : g.nodes)
    EXPECT_FALSE(n.op_type == "Cast" && n.GetInt("to", 0) == 1 && n.outputs[0] == q) << n.name;
}

// x -> LayerNormalization(ln_in) -> MatMul -> LayerNormalization(ln_mid) -> Softmax(attn)
// -> MatMul -> y, and Softmax(probs) on it as a graph output. ln_in reads float32 (the
// graph input) and stays float32; ln_mid and attn read half and keep half storage
// (their kernels compute in float32), so the half chain has no casts inside it;
// probs is a result the user reads: float32.
TEST(MixedPrecision, BoundedFloatMathKeepsHalfStorageInsideHalfChains) {
  Graph g;
  const int x = Val(g, "x", ValueKind::kInput, DType::kFloat32);
  const int s1 = Val(g, "s1", ValueKind::kWeight, DType::kFloat32);
  const int s2 = Val(g, "s2", ValueKind::kWeight, DType::kFloat32);
  const int w1 = Val(g, "W1", ValueKind::kWeight, DType::kFloat32);
  const int w2 = Val(g, "W2", ValueKind::kWeight, DType::kFloat32);
  int v[7];
  for (int k = 0; k < 7; ++k) v[k] = Val(g, "v" + std::to_string(k), ValueKind::kRuntime, DType::kFloat32);
  g.inputs = {x};
  g.AddNode(Op("LayerNormalization", "ln_in", {x, s1}, {v[0]}));
  g.AddNode(Op("MatMul", "mm1", {v[0], w1}, {v[1]}));
  g.AddNode(Op("LayerNormalization", "ln_mid", {v[1], s2}, {v[2]}));
  g.AddNode(Op("Softmax", "attn", {v[2]}, {v[3]}));
  g.AddNode(Op("MatMul", "mm2", {v[3], w2}, {v[4]}));
  g.AddNode(Op("Softmax", "probs", {v[4]}, {v[5]}));
  g.outputs = {v[5]};
  g.Verify();
  MixedPrecisionReport r = ApplyMixedPrecision(&g, Options());
  EXPECT_FALSE(Find(r, "ln_in")->half);
  for (const char* n : {"mm1", "ln_mid", "attn", "mm2"}) {
    EXPECT_TRUE(Find(r, n)->half) << n;
    EXPECT_EQ(g.values[NodeNamed(g, n)->inputs[0]].dtype, DType::kFloat16) << n;
    EXPECT_EQ(g.values[NodeNamed(g, n)->outputs[0]].dtype, DType::kFloat16) << n;
  }
  // The norm's scale stays float32 (the kernel reads float parameters with half rows).
  EXPECT_EQ(NodeNamed(g, "ln_mid")->inputs[1], s2);
  EXPECT_FALSE(Find(r, "probs")->half);
  EXPECT_EQ(Find(r, "probs")->reason, "float32 by rule");
  EXPECT_EQ(ProducerOf(g, v[5])->name, "probs");
  // ln_in -> mm1 (x in float32: one cast), W1, W2, and mm2 -> probs (one cast back).
  EXPECT_EQ(r.casts, 4);
}

// torch's key_padding_mask: Where(pad, -inf, zeros) -> scores + mask -> Softmax. Where
// keeps float32 (no half rule) but its result is float32 whatever the graph declared,
// so the Add over the half scores runs in half (the mask cast once) and Softmax keeps
// the chain in half.
TEST(MixedPrecision, WhereMaskOfFloatConstantsLetsTheScoresStayHalf) {
  Graph g;
  const int x = Val(g, "x", ValueKind::kInput, DType::kFloat32);
  const int pad = Val(g, "pad", ValueKind::kInput, DType::kBool);
  const int ninf = Val(g, "ninf", ValueKind::kConstant, DType::kFloat32);
  const int w = Val(g, "W", ValueKind::kWeight, DType::kFloat32);
  const int w2 = Val(g, "W2", ValueKind::kWeight, DType::kFloat32);
  const int zeros = Val(g, "zeros", ValueKind::kRuntime);  // ConstantOfShape: dtype not declared
  const int shape = Val(g, "shape", ValueKind::kRuntime, DType::kInt64);
  const int mask = Val(g, "mask", ValueKind::kRuntime), scores = Val(g, "scores", ValueKind::kRuntime);
  const int masked = Val(g, "masked", ValueKind::kRuntime), probs = Val(g, "probs", ValueKind::kRuntime);
  const int y = Val(g, "y", ValueKind::kRuntime);
  g.inputs = {x, pad};
  g.AddNode(Op("Shape", "shape", {pad}, {shape}));
  g.AddNode(Op("ConstantOfShape", "zeros", {shape}, {zeros}));
  g.AddNode(Op("Where", "mask", {pad, ninf, zeros}, {mask}));
  g.AddNode(Op("MatMul", "qk", {x, w}, {scores}));
  g.AddNode(Op("Add", "add_mask", {scores, mask}, {masked}));
  g.AddNode(Op("Softmax", "softmax", {masked}, {probs}));
  g.AddNode(Op("MatMul", "av", {probs, w2}, {y}));
  g.outputs = {y};
  g.Verify();
  MixedPrecisionReport r = ApplyMixedPrecision(&g, Options());
  for (const char* n : {"qk", "add_mask", "softmax", "av"}) {
    ASSERT_NE(Find(r, n), nullptr) << n;
    EXPECT_TRUE(Find(r, n)->half) << n;
  }
  const Node* add = NodeNamed(g, "add_mask");
  const Node* cast = ProducerOf(g, add->inputs[1]);
  ASSERT_NE(cast, nullptr);
  EXPECT_EQ(cast->op_type, "Cast");
  EXPECT_EQ(cast->inputs[0], mask);
  EXPECT_EQ(NodeNamed(g, "mask")->outputs[0], mask);  // Where itself unchanged
}

}  // namespace
}  // namespace kaiwu
