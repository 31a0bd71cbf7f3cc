// passes/layout_nhwc.cc on hand-built half-precision and integer graphs:
// which nodes become channels-last, which transposes are left, and what is
// never touched. The numbers (NhwcConv / NhwcMaxPool kernels against
// onnxruntime, channels-last integer convs against the CPU and onnxruntime)
// are checked on a GPU by tests/python/test_precision.py and test_cuda_int8.py.
#include <gtest/gtest.h>

#include <map>

#include "passes/layout_nhwc.h"
#include "passes/rewrite_util.h"
#include "graph_test_util.h"

namespace kaiwu {
namespace {

constexpr auto Op = testing::GraphOp;
constexpr auto Count = testing::CountOps;

int Val(Graph& g, const std::string& name, DType t, ValueKind kind = ValueKind::kRuntime) {
  Value v;
  v.name = name;
  v.kind = kind;
  v.dtype = t;
  return g.AddValue(v);
}

int Typed(Graph& g, const std::string& name, DType t, Shape shape, ValueKind kind) {
  Value v;
  v.name = name;
  v.kind = kind;
  v.dtype = t;
  v.data = std::make_shared<Tensor>(t, shape);
  v.has_shape = true;
  for (int64_t d : shape) v.dims.push_back(Dim{d, ""});
  return g.AddValue(v);
}

int Data(Graph& g, const std::string& name, Shape shape, ValueKind kind) {
  return Typed(g, name, DType::kFloat16, std::move(shape), kind);
}


bool AllKernels(OpId, DType) { return true; }

// Graph input x of `dtype`, read as NCHW: x itself, or Transpose(0,3,1,2) of it
// when channels_last_input (an NHWC input).
int NchwInput(Graph* g, DType dtype, bool channels_last_input) {
  const int x = Val(*g, "x", dtype, ValueKind::kInput);
  g->inputs = {x};
  if (!channels_last_input) return x;
  const int a = Val(*g, "a", dtype);
  Node t = Op("Transpose", {x}, {a});
  t.attrs["perm"] = IntsAttr({0, 3, 1, 2});
  g->AddNode(t);
  return a;
}

// x -> [Transpose(0,3,1,2) when channels_last_input] -> Conv(+Relu) -> MaxPool
//   -> r = pooled + Conv2(Relu(pooled)) * 0.5 -> Flatten -> y
Graph ResidualStack(bool channels_last_input) {
  Graph g;
  const int a = NchwInput(&g, DType::kFloat16, channels_last_input);
  int w1 = Data(g, "w1", {8, 3, 3, 3}, ValueKind::kWeight);
  int b1 = Data(g, "b1", {8}, ValueKind::kWeight);
  int w2 = Data(g, "w2", {8, 8, 3, 3}, ValueKind::kWeight);
  int half = Data(g, "half", {}, ValueKind::kConstant);
  int c1 = Val(g, "c1", DType::kFloat16), p = Val(g, "p", DType::kFloat16);
  int r = Val(g, "r", DType::kFloat16), c2 = Val(g, "c2", DType::kFloat16);
  int s = Val(g, "s", DType::kFloat16), sum = Val(g, "sum", DType::kFloat16);
  int y = Val(g, "y", DType::kFloat16);
  Node conv1 = Op("Conv", {a, w1, b1}, {c1});
  conv1.attrs["pads"] = IntsAttr({1, 1, 1, 1});
  conv1.attrs["kernel_shape"] = IntsAttr({3, 3});
  g.AddNode(conv1);
  Node pool = Op("MaxPool", {c1}, {p});
  pool.attrs["kernel_shape"] = IntsAttr({2, 2});
  pool.attrs["strides"] = IntsAttr({2, 2});
  g.AddNode(pool);
  g.AddNode(Op("Relu", {p}, {r}));
  Node conv2 = Op("Conv", {r, w2}, {c2});
  conv2.attrs["pads"] = IntsAttr({1, 1, 1, 1});
  g.AddNode(conv2);
  g.AddNode(Op("Mul", {c2, half}, {s}));
  g.AddNode(Op("Add", {p, s}, {sum}));
  g.AddNode(Op("Flatten", {sum}, {y}));
  g.outputs = {y};
  g.Verify();
  return g;
}

TEST(LayoutNhwc, ConvStackRunsChannelsLastWithTransposesOnlyAtTheEdges) {
  Graph g = ResidualStack(/*channels_last_input=*/false);
  EXPECT_EQ(ConvertToNhwc(&g, AllKernels), 3);
  EXPECT_EQ(Count(g, "Conv"), 0);
  EXPECT_EQ(Count(g, "MaxPool"), 0);
  EXPECT_EQ(Count(g, "NhwcConv"), 2);
  EXPECT_EQ(Count(g, "NhwcMaxPool"), 1);
  // The input into NHWC, the two weights (static nodes), and back before Flatten.
  EXPECT_EQ(Count(g, "Transpose"), 4);
  for (const Node& n : g.nodes) {
    if (n.op_type == "Flatten") {
      const Node& t = g.nodes[g.values[n.inputs[0]].producer];
      EXPECT_EQ(t.op_type, "Transpose");
      EXPECT_EQ(t.GetInts("perm"), (std::vector<int64_t>{0, 3, 1, 2}));
    }
    if (n.op_type == "NhwcConv") EXPECT_EQ(n.domain, "kaiwu");
  }
}

TEST(LayoutNhwc, ChannelsLastInputLosesItsTranspose) {
  Graph g = ResidualStack(/*channels_last_input=*/true);
  EXPECT_EQ(ConvertToNhwc(&g, AllKernels), 3);
  // Two weight transposes and the one before Flatten: the input's pair cancelled.
  EXPECT_EQ(Count(g, "Transpose"), 3);
  for (const Node& n : g.nodes)
    if (n.op_type == "NhwcConv" && n.inputs[0] == g.inputs[0]) return;
  ADD_FAILURE() << "the first NhwcConv should read the NHWC input directly";
}

TEST(LayoutNhwc, LeavesFloat32GroupedAndUnsupportedConvsAlone) {
  Graph g = ResidualStack(false);
  // Without kernels for the NHWC ops nothing changes.
  EXPECT_EQ(ConvertToNhwc(&g, [](OpId, DType) { return false; }), 0);
  EXPECT_EQ(Count(g, "Conv"), 2);
  EXPECT_EQ(Count(g, "Transpose"), 0);

  Graph f;
  int x = Val(f, "x", DType::kFloat32, ValueKind::kInput);
  f.inputs = {x};
  Value w;
  w.name = "w";
  w.kind = ValueKind::kWeight;
  w.dtype = DType::kFloat32;
  w.data = std::make_shared<Tensor>(DType::kFloat32, Shape{4, 2, 3, 3});
  int wv = f.AddValue(w);
  int y = Val(f, "y", DType::kFloat32);
  f.AddNode(Op("Conv", {x, wv}, {y}));
  f.outputs = {y};
  f.Verify();
  EXPECT_EQ(ConvertToNhwc(&f, AllKernels), 0);  // float32 stays NCHW

  Graph h = ResidualStack(false);
  for (Node& n : h.nodes)
    if (n.op_type == "Conv") n.attrs["group"] = IntAttr(2);
  EXPECT_EQ(ConvertToNhwc(&h, AllKernels), 1);  // only the MaxPool
  EXPECT_EQ(Count(h, "Conv"), 2);
}

TEST(LayoutNhwc, GraphOutputsKeepTheirNamesAndLayout) {
  // x -> Conv -> y (a graph output): y is still written NCHW under its own name.
  Graph g;
  int x = Val(g, "x", DType::kFloat16, ValueKind::kInput);
  g.inputs = {x};
  int w = Data(g, "w", {4, 3, 1, 1}, ValueKind::kWeight);
  int y = Val(g, "y", DType::kFloat16);
  g.AddNode(Op("Conv", {x, w}, {y}));
  g.outputs = {y};
  g.Verify();
  EXPECT_EQ(ConvertToNhwc(&g, AllKernels), 1);
  ASSERT_EQ(g.outputs.size(), 1u);
  EXPECT_EQ(g.values[g.outputs[0]].name, "y");
  const Node& last = g.nodes[g.values[g.outputs[0]].producer];
  EXPECT_EQ(last.op_type, "Transpose");
  EXPECT_EQ(last.GetInts("perm"), (std::vector<int64_t>{0, 3, 1, 2}));
}

Node Kaiwu(const std::string& op, std::vector<int> in, std::vector<int> out) {
  Node n = Op(op, std::move(in), std::move(out));
  n.domain = "kaiwu";
  n.opset = 1;
  return n;
}

// x (float) -> [Transpose(0,3,1,2) when channels_last_input] -> QuantizeLinear
//   -> QLinearFused conv 1 -> QLinearFused conv 2 -> DequantizeLinear -> Flatten -> y,
// each conv's packed operand from its own QPackWeights over an int8 [M, C, 3, 3] weight.
Graph IntegerStack(bool channels_last_input) {
  Graph g;
  const int a = NchwInput(&g, DType::kFloat32, channels_last_input);
  int scale = Typed(g, "scale", DType::kFloat32, {}, ValueKind::kConstant);
  int zp = Typed(g, "zp", DType::kUInt8, {}, ValueKind::kConstant);
  int q = Val(g, "q", DType::kUInt8);
  g.AddNode(Op("QuantizeLinear", {a, scale, zp}, {q}));
  int prev = q;
  for (int i = 1; i <= 2; ++i) {
    const std::string s = std::to_string(i);
    int w = Typed(g, "w" + s, DType::kInt8, {8, i == 1 ? 3 : 8, 3, 3}, ValueKind::kWeight);
    int packed = Val(g, "packed" + s, DType::kUInt8);
    g.AddNode(Kaiwu("QPackWeights", {w, scale, -1, scale, zp, -1, scale, zp}, {packed}));
    int c = Val(g, "c" + s, DType::kUInt8);
    Node conv = Kaiwu("QLinearFused", {prev, packed}, {c});
    conv.attrs["conv"] = IntAttr(1);
    conv.attrs["kernel_shape"] = IntsAttr({3, 3});
    conv.attrs["pads"] = IntsAttr({1, 1, 1, 1});
    g.AddNode(conv);
    prev = c;
  }
  int d = Val(g, "d", DType::kFloat32), y = Val(g, "y", DType::kFloat32);
  g.AddNode(Op("DequantizeLinear", {prev, scale, zp}, {d}));
  g.AddNode(Op("Flatten", {d}, {y}));
  g.outputs = {y};
  g.Verify();
  return g;
}

const Node& ProducerOf(const Graph& g, int v) { return g.nodes[g.values[v].producer]; }

TEST(LayoutNhwc, IntegerConvStackRunsChannelsLastWithItsWeightsPackedTransposed) {
  Graph g = IntegerStack(/*channels_last_input=*/false);
  EXPECT_EQ(ConvertQLinearConvsToNhwc(&g), 2);
  // Into NHWC after the QuantizeLinear (bytes), the two weights, and back before
  // the DequantizeLinear (not moved below it: that would transpose floats).
  EXPECT_EQ(Count(g, "Transpose"), 4);
  int convs = 0;
  std::map<std::string, int> from;
  for (const Node& n : g.nodes) {
    if (n.op_type == "QLinearFused") {
      ++convs;
      EXPECT_EQ(n.GetInt("channels_last", 0), 1);
    }
    if (n.op_type == "QPackWeights") {
      const Node& t = ProducerOf(g, n.inputs[0]);
      EXPECT_EQ(t.op_type, "Transpose");
      EXPECT_EQ(t.GetInts("perm"), (std::vector<int64_t>{0, 2, 3, 1}));
    }
    if (n.op_type == "DequantizeLinear") {
      const Node& t = ProducerOf(g, n.inputs[0]);
      EXPECT_EQ(t.op_type, "Transpose");
      EXPECT_EQ(t.GetInts("perm"), (std::vector<int64_t>{0, 3, 1, 2}));
    }
    // The first conv reads the quantized input through a Transpose, the second
    // the first one's NHWC output directly.
    if (n.op_type == "QLinearFused") from[ProducerOf(g, n.inputs[0]).op_type]++;
  }
  EXPECT_EQ(convs, 2);
  EXPECT_EQ(from["Transpose"], 1);
  EXPECT_EQ(from["QLinearFused"], 1);
}

TEST(LayoutNhwc, ChannelsLastFloatInputLosesItsTransposeThroughQuantizeLinear) {
  Graph g = IntegerStack(/*channels_last_input=*/true);
  EXPECT_EQ(ConvertQLinearConvsToNhwc(&g), 2);
  EXPECT_EQ(Count(g, "Transpose"), 3);  // two weights, one before the DequantizeLinear
  for (const Node& n : g.nodes)
    if (n.op_type == "QuantizeLinear") EXPECT_EQ(n.inputs[0], g.inputs[0]);
}

// IntegerStack with conv 1 -> DequantizeLinear -> MaxPool -> Relu -> QuantizeLinear -> conv 2.
// conv 1 -> DequantizeLinear -> MaxPool [-> Relu] -> QuantizeLinear -> conv 2.
Graph IntegerStackWithFloatPool(bool relu) {
  Graph g = IntegerStack(false);
  int c1 = g.Find("c1");
  int scale = g.Find("scale"), zp = g.Find("zp");
  int d = Val(g, "d1", DType::kFloat32), p = Val(g, "p1", DType::kFloat32), q = Val(g, "q1", DType::kUInt8);
  for (Node& n : g.nodes)
    if (n.op_type == "QLinearFused" && n.inputs[0] == c1) n.inputs[0] = q;
  g.AddNode(Op("DequantizeLinear", {c1, scale, zp}, {d}));
  Node pool = Op("MaxPool", {d}, {p});
  pool.attrs["kernel_shape"] = IntsAttr({2, 2});
  g.AddNode(pool);
  int last = p;
  if (relu) {
    last = Val(g, "r1", DType::kFloat32);
    g.AddNode(Op("Relu", {p}, {last}));
  }
  g.AddNode(Op("QuantizeLinear", {last, scale, zp}, {q}));
  g.Verify();
  return g;
}

TEST(LayoutNhwc, CpuIntegerConvsTakeTheFloatSectionChannelsLast) {
  // cpu_session (CPU sessions): the MaxPool between the convs becomes NhwcMaxPool and the
  // transposes sink through the per-tensor DequantizeLinear, so they cancel in between:
  // two weights, one into NHWC after the first QuantizeLinear, one back at the end.
  Graph g = IntegerStackWithFloatPool(/*relu=*/true);
  EXPECT_EQ(ConvertQLinearConvsToNhwc(&g, /*cpu_session=*/true), 2);
  EXPECT_EQ(Count(g, "Transpose"), 4);
  EXPECT_EQ(Count(g, "NhwcMaxPool"), 1);
  EXPECT_EQ(Count(g, "MaxPool"), 0);
  for (const Node& n : g.nodes) {
    if (n.op_type == "QLinearFused") EXPECT_EQ(n.GetInt("channels_last", 0), 1) << n.Describe();
    if (n.op_type == "QPackWeights") EXPECT_EQ(n.GetInt("gemm_layout", 0), 1) << n.Describe();
    if (n.op_type == "NhwcMaxPool") EXPECT_EQ(ProducerOf(g, n.inputs[0]).op_type, "DequantizeLinear");
  }
}

TEST(LayoutNhwc, IntegerConvsAroundAFloatSectionStayNchw) {
  // conv 1 -> DequantizeLinear -> MaxPool -> QuantizeLinear -> conv 2: channels-last convs
  // would need a transpose pair around the float MaxPool on top of the edges' two
  // (device sessions: transposes do not sink through DequantizeLinear there).
  Graph g = IntegerStackWithFloatPool(/*relu=*/false);
  const size_t nodes = g.nodes.size();
  EXPECT_EQ(ConvertQLinearConvsToNhwc(&g), 0);
  EXPECT_EQ(Count(g, "Transpose"), 0);
  EXPECT_EQ(g.nodes.size(), nodes);
  for (const Node& n : g.nodes) EXPECT_EQ(n.GetInt("channels_last", 0), 0) << n.Describe();
}

TEST(LayoutNhwc, LeavesIntegerGemmsAndSharedPackedOperandsAlone) {
  Graph g = IntegerStack(false);
  for (Node& n : g.nodes)
    if (n.op_type == "QLinearFused") n.attrs["conv"] = IntAttr(0);
  EXPECT_EQ(ConvertQLinearConvsToNhwc(&g), 0);
  EXPECT_EQ(Count(g, "Transpose"), 0);

  // A packed operand that a second node also reads is not rewritten.
  Graph h = IntegerStack(false);
  int first_packed = -1;
  for (const Node& n : h.nodes)
    if (n.op_type == "QPackWeights" && first_packed < 0) first_packed = n.outputs[0];
  int extra = Val(h, "extra", DType::kUInt8);
  h.AddNode(Op("Identity", {first_packed}, {extra}));
  h.outputs.push_back(extra);
  h.Verify();
  EXPECT_EQ(ConvertQLinearConvsToNhwc(&h), 1);
}

}  // namespace
}  // namespace kaiwu
