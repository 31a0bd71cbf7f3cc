// Q(f(x)) for 8-bit x and a chain f of elementwise ops each with one runtime
// input and otherwise static scalar operands (DequantizeLinear per tensor,
// Cast to float, Add/Sub/Mul/Div by a constant, Tanh, Sigmoid, Relu, ...)
// becomes kaiwu QLookup(x, table): the 256 outputs are computed by ordinary
// static nodes, the same chain over the constant 0..255 (in x's byte order),
// so refit recomputes the table. Typical: DQ -> Tanh -> Q, and the input
// normalisation frames (uint8) -> Cast -> Div(255) -> Q. Conditions: the Q per
// tensor with static scale and zero point; every value inside the chain read
// only by the next node, except the first link's (the DequantizeLinear or
// Cast of x), which stays for its other readers (a residual block's skip
// reads DQ(x) while its branch takes Q(Relu(DQ(x))): the branch becomes a lookup).
#include <cstring>

#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {
namespace {

bool IsUnaryLookupOp(const std::string& op) {
  static const char* kOps[] = {"Tanh", "Sigmoid", "Relu", "LeakyRelu", "Elu", "Selu", "HardSigmoid",
                               "HardSwish", "Softplus", "Softsign", "Gelu", "Mish", "Abs", "Neg", "Exp"};
  for (const char* o : kOps)
    if (op == o) return true;
  return false;
}

// Node n as a chain link over runtime input `v`: its other inputs static scalars.
bool IsLink(const Graph& g, const std::vector<bool>& st, const Node& n, int v) {
  if (!n.domain.empty() || n.outputs.size() != 1 || n.num_inputs() < 1) return false;
  const std::string& op = n.op_type;
  if (IsUnaryLookupOp(op)) return n.num_inputs() == 1 && n.inputs[0] == v;
  if (op == "Cast") return n.inputs[0] == v && n.GetInt("to", 0) == 1;  // to float
  if (op == "DequantizeLinear")
    return n.inputs[0] == v && n.GetInt("block_size", 0) == 0 && StaticScalar(g, st, n.inputs[1]) &&
           (!n.HasInput(2) || StaticScalar(g, st, n.inputs[2]));
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div")
    return n.num_inputs() == 2 && ((n.inputs[0] == v && StaticScalar(g, st, n.inputs[1])) ||
                                   (n.inputs[1] == v && StaticScalar(g, st, n.inputs[0])));
  return false;
}

// A per-tensor Q with static scale (and zero point) of 8-bit dtype `*dt`.
bool PerTensorStatic(const Graph& g, const std::vector<bool>& st, const Node& n, DType* dt) {
  if (!n.domain.empty() || !n.HasInput(1) || !StaticScalar(g, st, n.inputs[1]) ||
      n.GetInt("block_size", 0) != 0)
    return false;
  if (n.HasInput(2) && !StaticScalar(g, st, n.inputs[2])) return false;
  *dt = n.HasInput(2) ? g.values[n.inputs[2]].dtype : DType::kUInt8;
  return *dt == DType::kUInt8 || *dt == DType::kInt8;
}

}  // namespace

int FuseQdqLookup(Graph* g) {
  int fired = 0;
  const std::vector<int> uses = UseCounts(*g);
  const std::vector<bool> st = StaticValues(*g);
  const std::vector<int> producer = Producers(*g);
  const std::vector<std::vector<int>> consumers = g->Consumers();
  const size_t original = g->nodes.size();
  for (size_t qi = 0; qi < original; ++qi) {
    const Node& q = g->nodes[qi];
    DType ydt;
    if (q.op_type != "QuantizeLinear" || !PerTensorStatic(*g, st, q, &ydt) || q.GetInt("output_dtype", 0) != 0)
      continue;
    // Walk back from the Q's input through links to an 8-bit runtime value.
    std::vector<int> chain;  // node indices, last link first
    int v = q.inputs[0], start = -1;
    DType xdt = DType::kUndefined;
    bool keep_first = false;  // the first link's output has other readers
    while (v >= 0 && producer[v] >= 0 && chain.size() < 8) {
      const bool shared = uses[v] != 1 || IsGraphOutput(*g, v);
      if (shared && chain.empty()) break;  // the Q's own input: nothing would be saved
      const int p = producer[v];
      const Node& n = g->nodes[p];
      int in = -1;
      for (int x : n.inputs)
        if (x >= 0 && !st[x]) in = x;
      if (in < 0 || !IsLink(*g, st, n, in)) break;
      const DType in_dt = n.op_type == "DequantizeLinear" && n.HasInput(2) ? g->values[n.inputs[2]].dtype
                                                                             : g->values[in].dtype;
      const bool first = (in_dt == DType::kUInt8 || in_dt == DType::kInt8) &&
                         (n.op_type == "DequantizeLinear" || n.op_type == "Cast");
      if (shared && !first) break;  // only the first link may keep other readers
      chain.push_back(p);
      if (first) {
        start = in;
        xdt = in_dt;
        keep_first = shared;
        break;
      }
      v = in;
    }
    if (start < 0 || st[start]) continue;
    // The 256 raw bytes of x's dtype, in byte order (int8: 0..127, -128..-1).
    Tensor codes(xdt, {256});
    for (int b = 0; b < 256; ++b) static_cast<uint8_t*>(codes.data())[b] = static_cast<uint8_t>(b);
    const std::string base = q.name.empty() ? "qlookup" : q.name;
    int cur = AddConstant(g, std::move(codes), base + "_codes");
    int prev_runtime = start;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const Node n = g->nodes[*it];  // copy: AddOp may reallocate nodes
      std::vector<int> ins = n.inputs;
      for (int& x : ins)
        if (x == prev_runtime) x = cur;
      prev_runtime = n.outputs[0];
      cur = AddOp(g, n.op_type, ins, base + "_codes_" + n.op_type);
      g->nodes.back().attrs = n.attrs;
    }
    const Node qc = g->nodes[qi];
    std::vector<int> ins = qc.inputs;
    ins[0] = cur;
    const int table = AddOp(g, "QuantizeLinear", ins, base + "_table");
    g->nodes.back().attrs = qc.attrs;
    Node lookup;
    lookup.op_type = "QLookup";
    lookup.domain = "kaiwu";
    lookup.opset = 1;
    lookup.name = base + "_lookup";
    lookup.inputs = {start, table};
    lookup.outputs = {qc.outputs[0]};
    for (size_t c = 0; c < chain.size(); ++c)
      if (!(keep_first && c + 1 == chain.size())) MarkRemoved(&g->nodes[chain[c]]);
    MarkRemoved(&g->nodes[qi]);
    g->AddNode(std::move(lookup));
    ++fired;
  }
  if (fired) RemoveMarkedNodes(g);
  return fired;
}

}  // namespace kaiwu
