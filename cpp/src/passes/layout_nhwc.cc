#include "passes/layout_nhwc.h"

#include <set>
#include <string>
#include <vector>

#include "ops/binary.h"
#include "ops/quant.h"
#include "passes/match_util.h"
#include "passes/rewrite_util.h"

namespace kaiwu {

namespace {

const std::vector<int64_t> kToNhwc = {0, 2, 3, 1};
const std::vector<int64_t> kToNchw = {0, 3, 1, 2};

// Elementwise ops a Transpose commutes with when every operand is transposed
// the same way or holds a single element (broadcast alike in any layout).
const std::set<std::string> kElementwise = {
    "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs", "Sqrt", "Elu", "Selu",
    "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Gelu", "Mish", "Identity", "Cast",
    "Erf", "Log", "Clip", "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Add", "Sub", "Mul",
    "Div", "Max", "Min", "Pow", "Sum", "Mean"};

// The rank of v, looking through the static nodes that derive a conv weight
// (Cast to half, BatchNorm folding) when v carries no shape.
int RankOf(const Graph& g, const std::vector<int>& producer, int v) {
  for (int hops = 0; hops < 8 && v >= 0; ++hops) {
    const int r = KnownRank(g, v);
    if (r >= 0) return r;
    if (g.values[v].data) return static_cast<int>(g.values[v].data->shape().size());
    const int p = producer[v];
    if (p < 0 || g.nodes[p].inputs.empty()) return -1;
    v = g.nodes[p].inputs[0];
  }
  return -1;
}

// True when v holds one element in every run: a one-element weight or
// constant, or a static Cast / unary node over one (mixed precision casts a
// scalar operand to half by a static node).
bool OneElement(const Graph& g, const std::vector<int>& producer, int v) {
  for (int hops = 0; hops < 4 && v >= 0; ++hops) {
    const Value& val = g.values[v];
    if (val.data) return val.data->size() == 1;
    const int p = producer[v];
    if (p < 0 || g.nodes[p].num_inputs() != 1 || !g.nodes[p].domain.empty() ||
        !kElementwise.count(g.nodes[p].op_type))
      return false;
    v = g.nodes[p].inputs[0];
  }
  return false;
}

// The dtype of v where the graph does not record it (intermediates of an
// exported model): from a Cast's target, a weight's data, or the type input
// of the ops that keep it (Conv/Gemm/MatMul: their weight; pools and
// elementwise ops: input 0). Undefined when none of these says.
DType ElementTypeOf(const Graph& g, const std::vector<int>& producer, int v) {
  for (int hops = 0; hops < 32 && v >= 0; ++hops) {
    const Value& val = g.values[v];
    if (val.data) return val.data->dtype();
    if (val.dtype != DType::kUndefined) return val.dtype;
    const int p = producer[v];
    if (p < 0 || g.nodes[p].inputs.empty()) return DType::kUndefined;
    const Node& n = g.nodes[p];
    if (n.domain.empty() && n.op_type == "Cast") return DTypeFromOnnxCode(n.GetInt("to", 0));
    const bool weighted = n.op_type == "Conv" || n.op_type == "Gemm" || n.op_type == "MatMul" ||
                          n.op_type == "NhwcConv" || n.op_type == "PackedGemm";
    const bool keeps = kElementwise.count(n.op_type) || n.op_type == "MaxPool" ||
                       n.op_type == "NhwcMaxPool" || n.op_type == "FusedElementwise" ||
                       n.op_type == "Transpose" || n.op_type == "Reshape" || n.op_type == "Flatten";
    if (weighted && n.num_inputs() > 1) {
      v = n.inputs[1];
    } else if (keeps && n.op_type != "Cast") {
      v = n.inputs[0];
    } else {
      return DType::kUndefined;
    }
  }
  return DType::kUndefined;
}

int AddTranspose(Graph* g, int x, const std::vector<int64_t>& perm, const std::string& hint,
                 int out = -1) {
  if (out < 0) {
    out = AddIntermediate(g, hint);
    g->values[out].dtype = g->values[x].dtype;
  }
  Node t;
  t.op_type = "Transpose";
  t.name = g->values[out].name;
  t.opset = g->opset;
  t.inputs = {x};
  t.outputs = {out};
  t.attrs["perm"] = IntsAttr(perm);
  g->AddNode(std::move(t));
  return out;
}

// Node i gives way to `op` (its inputs already channels-last), which writes a
// new NHWC value that a Transpose turns back into node i's output.
void ReplaceWithChannelsLast(Graph* g, size_t i, Node op) {
  const int y = g->nodes[i].outputs[0];
  const int y_nhwc = AddIntermediate(g, g->nodes[i].name + "_nhwc");
  g->values[y_nhwc].dtype = g->values[y].dtype;
  op.outputs[0] = y_nhwc;
  MarkRemoved(&g->nodes[i]);
  g->AddNode(std::move(op));
  AddTranspose(g, y_nhwc, kToNchw, "", y);
}

// Conv / MaxPool node i -> T(NCHW->NHWC) -> op -> T(NHWC->NCHW); false when it does not qualify.
bool Convert(Graph* g, const std::vector<int>& producer, size_t i, DType dtype,
             const std::function<bool(OpId, DType)>& has_kernel,
             const std::function<bool(const Node&, DType)>& accepts) {
  const Node n = g->nodes[i];
  if (!n.domain.empty() || n.inputs.empty() || n.inputs[0] < 0 || n.outputs.empty() || n.outputs[0] < 0)
    return false;
  const bool conv = n.op_type == "Conv";
  if (!conv && n.op_type != "MaxPool") return false;
  const int x = n.inputs[0];
  if (!accepts(n, dtype) || !has_kernel(conv ? OpId::kNhwcConv : OpId::kNhwcMaxPool, dtype))
    return false;
  if (conv) {
    if (n.num_inputs() < 2 || n.inputs[1] < 0 || n.GetInt("group", 1) != 1) return false;
    if (RankOf(*g, producer, n.inputs[1]) != 4) return false;
  } else {
    if (n.outputs.size() > 1 && n.outputs[1] >= 0) return false;  // Indices: NCHW positions
    if (n.GetInts("kernel_shape").size() != 2) return false;
  }
  Node op = n;
  op.op_type = conv ? "NhwcConv" : "NhwcMaxPool";
  op.domain = "kaiwu";
  op.opset = 1;
  op.outputs.resize(1);
  op.attrs.erase("storage_order");
  op.inputs[0] = AddTranspose(g, x, kToNhwc, n.name + "_in_nhwc");
  if (conv) op.inputs[1] = AddTranspose(g, n.inputs[1], kToNhwc, n.name + "_w_nhwc");
  op.name = n.name;
  ReplaceWithChannelsLast(g, i, std::move(op));
  return true;
}

// kaiwu QLinearFused conv node i (2-D, group 1, its packed operand written
// by a QPackWeights that only it reads) -> T(NCHW->NHWC) -> the node with
// channels_last = 1 -> T(NHWC->NCHW); QPackWeights then packs the weight
// transposed to [M, KH, KW, C] (a static node: refit re-derives it), and a
// residual input is transposed like x.
bool ConvertQFused(Graph* g, const std::vector<int>& producer, const std::vector<int>& uses, size_t i,
                   bool cpu_session, int row_align) {
  const Node n = g->nodes[i];
  if (n.domain != "kaiwu" || n.op_type != "QLinearFused" || n.GetInt("conv", 0) == 0 ||
      n.GetInt("channels_last", 0) != 0 || n.GetInt("group", 1) != 1 ||
      n.GetInts("kernel_shape").size() != 2)
    return false;
  if (n.num_inputs() < 2 || n.inputs[0] < 0 || n.inputs[1] < 0 || n.outputs.empty() || n.outputs[0] < 0)
    return false;
  const int pack = producer[n.inputs[1]];
  if (pack < 0 || g->nodes[pack].op_type != "QPackWeights" || g->nodes[pack].domain != "kaiwu" ||
      uses[n.inputs[1]] != 1 || IsGraphOutput(*g, n.inputs[1]))
    return false;
  const int w = g->nodes[pack].inputs[0];
  if (w < 0 || RankOf(*g, producer, w) != 4) return false;
  Node op = n;
  op.attrs["channels_last"] = IntAttr(1);
  op.inputs[0] = AddTranspose(g, n.inputs[0], kToNhwc, n.name + "_in_nhwc");
  if (n.num_inputs() > 2 && n.inputs[2] >= 0)
    op.inputs[2] = AddTranspose(g, n.inputs[2], kToNhwc, n.name + "_residual_nhwc");
  const int w_nhwc = AddTranspose(g, w, kToNhwc, n.name + "_w_nhwc");
  g->nodes[pack].inputs[0] = w_nhwc;
  // The CPU kernel's product has pixels as rows: weights in the Gemm blocks
  // (ops/quant.h QPackedLayout).
  if (cpu_session) g->nodes[pack].attrs["gemm_layout"] = IntAttr(1);
  // Kernel rows read in place (row_align > 0): each row's KW * C weights
  // padded with zeros to row_bytes, for dilation 1 along W (a row's taps are
  // one run of input bytes) and channels in whole 16-lane tiles (no row dots).
  const std::vector<int64_t> kernel = n.GetInts("kernel_shape");
  const std::vector<int64_t> dil = n.GetInts("dilations");
  const int64_t k = n.GetInt("k", 0), m = n.GetInt("n", 0);
  const bool dense_w = dil.size() != 2 || dil[1] == 1;
  const bool whole_tiles = m % 16 == 0 || m % 16 > QPackedLayout::kQDotTail;
  if (cpu_session && row_align > 0 && dense_w && whole_tiles && k > 0 && k % kernel[0] == 0) {
    const int64_t run = k / kernel[0];
    const int64_t row_bytes = (run + row_align - 1) / row_align * row_align;
    g->nodes[pack].attrs["k_rows"] = IntAttr(kernel[0]);
    g->nodes[pack].attrs["row_bytes"] = IntAttr(row_bytes);
    op.attrs["row_bytes"] = IntAttr(row_bytes);
  }
  ReplaceWithChannelsLast(g, i, std::move(op));
  return true;
}

// The ops a Transpose moves below: the elementwise ones, and QuantizeLinear
// when its scale and zero point hold one element (SinkTransposes checks the
// operands), which moves it onto the narrower type. DequantizeLinear only with
// through_dq (CPU sessions, whose float sections between integer convs then
// run channels-last too): elsewhere it would transpose 4-byte floats instead
// of bytes.
bool SinksThrough(const Node& n, bool through_dq) {
  if (n.op_type == "FusedElementwise" && n.domain == "kaiwu") return true;
  // A byte table over x (input 1, the table, carries no layout): with through_dq too.
  if (n.op_type == "QLookup" && n.domain == "kaiwu") return through_dq;
  if (!n.domain.empty()) return false;
  if (n.op_type == "DequantizeLinear") return through_dq && n.GetInt("block_size", 0) == 0;
  return kElementwise.count(n.op_type) || (n.op_type == "QuantizeLinear" && n.GetInt("block_size", 0) == 0);
}

// The perm of a default-domain Transpose with an explicit perm, or empty.
std::vector<int64_t> PermOf(const Node& t) {
  if (t.op_type != "Transpose" || !t.domain.empty() || !t.HasInput(0)) return {};
  return t.GetInts("perm");
}

// Elementwise node whose operands are all T(perm)(a) or one-element constants:
// reads the a's and writes a new value, followed by T(perm) into its old output.
int SinkTransposes(Graph* g, bool through_dq) {
  const std::vector<int> producer = Producers(*g);
  int fired = 0;
  const size_t count = g->nodes.size();
  for (size_t i = 0; i < count; ++i) {
    const Node& n = g->nodes[i];
    if (!SinksThrough(n, through_dq)) continue;
    if (n.outputs.size() != 1 || n.outputs[0] < 0) continue;
    std::vector<int64_t> perm;
    bool ok = true;
    const size_t layout_inputs = n.op_type == "QLookup" ? 1 : n.inputs.size();
    for (size_t k = 0; k < layout_inputs; ++k) {
      const int v = n.inputs[k];
      if (v < 0) continue;
      const int p = producer[v];
      const std::vector<int64_t> q = p >= 0 ? PermOf(g->nodes[p]) : std::vector<int64_t>{};
      if (!q.empty()) {
        if (perm.empty()) perm = q;
        ok = ok && q == perm;
      } else {
        ok = ok && OneElement(*g, producer, v);
      }
    }
    if (!ok || perm.empty()) continue;
    Node moved = n;
    for (size_t k = 0; k < layout_inputs; ++k) {
      int& v = moved.inputs[k];
      if (v >= 0 && producer[v] >= 0 && !PermOf(g->nodes[producer[v]]).empty())
        v = g->nodes[producer[v]].inputs[0];
    }
    const int y = n.outputs[0];
    const int mid = AddIntermediate(g, n.name + "_t");
    g->values[mid].dtype = g->values[y].dtype;
    moved.outputs[0] = mid;
    MarkRemoved(&g->nodes[i]);
    g->AddNode(std::move(moved));
    AddTranspose(g, mid, perm, "", y);
    ++fired;
  }
  if (fired) RemoveMarkedNodes(g);
  return fired;
}

// T2(T1(x)) reads x through one Transpose, or none when the perms cancel (kept
// as an identity Transpose only where its output is a graph output).
int FoldTransposes(Graph* g) {
  const std::vector<int> producer = Producers(*g);
  int fired = 0;
  for (size_t i = 0; i < g->nodes.size(); ++i) {
    Node& t2 = g->nodes[i];
    const std::vector<int64_t> p2 = PermOf(t2);
    if (p2.empty()) continue;
    const int p = producer[t2.inputs[0]];
    if (p < 0) continue;
    const std::vector<int64_t> p1 = PermOf(g->nodes[p]);
    if (p1.size() != p2.size()) continue;
    bool valid = true;
    for (int64_t k : p2) valid = valid && k >= 0 && k < static_cast<int64_t>(p1.size());
    if (!valid) continue;
    std::vector<int64_t> q(p2.size());
    bool identity = true;
    for (size_t k = 0; k < q.size(); ++k) {
      q[k] = p1[p2[k]];
      identity = identity && q[k] == static_cast<int64_t>(k);
    }
    const int x = g->nodes[p].inputs[0];
    const int out = t2.outputs[0];
    if (identity && !IsGraphOutput(*g, out)) {
      MarkRemoved(&t2);
      ReplaceUses(g, out, x);
    } else {
      t2.inputs[0] = x;
      t2.attrs["perm"] = IntsAttr(q);
    }
    ++fired;
    break;  // producers changed: the caller loops
  }
  if (fired) RemoveMarkedNodes(g);
  return fired;
}

// Transposes moved down through elementwise ops and inverse pairs cancelled.
void SinkAndFold(Graph* g, bool through_dq = false) {
  for (int round = 0; round < 1000; ++round)
    if (!SinkTransposes(g, through_dq) && !FoldTransposes(g)) break;
  g->RemoveDeadNodes();
  g->Verify();
}

}  // namespace

int ConvertToNhwc(Graph* g, const std::function<bool(OpId, DType)>& has_kernel) {
  return ConvertToNhwc(g, has_kernel, [](const Node&, DType t) { return IsHalf(t); });
}

int ConvertToNhwc(Graph* g, const std::function<bool(OpId, DType)>& has_kernel,
                  const std::function<bool(const Node&, DType)>& accepts) {
  int converted = 0;
  {
    const std::vector<int> producer = Producers(*g);
    const size_t count = g->nodes.size();
    // Input dtypes first: converting rewires the producers ElementTypeOf follows.
    std::vector<DType> dtypes(count, DType::kUndefined);
    for (size_t i = 0; i < count; ++i) {
      const Node& n = g->nodes[i];
      if (!n.inputs.empty() && n.inputs[0] >= 0 && (n.op_type == "Conv" || n.op_type == "MaxPool"))
        dtypes[i] = ElementTypeOf(*g, producer, n.inputs[0]);
    }
    for (size_t i = 0; i < count; ++i)
      converted += Convert(g, producer, i, dtypes[i], has_kernel, accepts) ? 1 : 0;
  }
  if (!converted) return 0;
  RemoveMarkedNodes(g);
  SinkAndFold(g);
  return converted;
}

int ConvertQLinearConvsToNhwc(Graph* g, bool cpu_session, int row_align) {
  const auto runtime_transposes = [](const Graph& graph) {
    const std::vector<bool> st = StaticValues(graph);
    int n = 0;
    for (const Node& node : graph.nodes)
      n += !PermOf(node).empty() && !st[node.inputs[0]] ? 1 : 0;
    return n;
  };
  const Graph before = *g;
  const int transposes_before = runtime_transposes(before);
  int converted = 0;
  {
    const std::vector<int> producer = Producers(*g);
    const std::vector<int> uses = UseCounts(*g);
    const size_t count = g->nodes.size();
    for (size_t i = 0; i < count; ++i) converted += ConvertQFused(g, producer, uses, i, cpu_session, row_align) ? 1 : 0;
    // CPU: the float max pools between integer convs (DequantizeLinear -> MaxPool,
    // IMPALA's blocks) channels-last as well, so that the transposes meet and cancel.
    if (converted && cpu_session) {
      const auto yes_kernel = [](OpId, DType) { return true; };
      const auto float_pool = [](const Node&, DType) { return true; };
      for (size_t i = 0; i < count; ++i) {
        const Node& n = g->nodes[i];
        if (n.op_type != "MaxPool" || !n.domain.empty() || n.inputs.empty() || n.inputs[0] < 0) continue;
        const int p = producer[n.inputs[0]];
        if (p < 0 || g->nodes[p].op_type != "DequantizeLinear" || !g->nodes[p].domain.empty()) continue;
        Convert(g, producer, i, DType::kFloat32, yes_kernel, float_pool);
      }
    }
  }
  if (!converted) return 0;
  RemoveMarkedNodes(g);
  SinkAndFold(g, /*through_dq=*/cpu_session);
  // One conversion into the conv stack and one out of it pay for themselves;
  // float sections between integer convs (DequantizeLinear -> MaxPool / Add ->
  // QuantizeLinear, as IMPALA's quantized blocks have) would each add a pair
  // over full feature maps: such graphs stay NCHW.
  if (runtime_transposes(*g) - transposes_before > 2) {
    *g = before;
    return 0;
  }
  return converted;
}

}  // namespace kaiwu
