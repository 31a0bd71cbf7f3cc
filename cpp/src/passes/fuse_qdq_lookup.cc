// Q(f(DQ(x))) for an elementwise float op f of one runtime input (Tanh,
// Sigmoid, Relu, ...) with 8-bit x becomes kaiwu QLookup(x, table): the 256
// outputs are computed by ordinary static nodes Q(f(DQ(0..255))) over the
// original scales, so refit recomputes the table. Conditions: DQ and Q per
// tensor with static scales and zero points; f's output read only by the Q.
#include <cstring>

#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {
namespace {

bool IsLookupOp(const Node& n) {
  static const char* kOps[] = {"Tanh", "Sigmoid", "Relu", "LeakyRelu", "Elu", "Selu", "HardSigmoid",
                               "HardSwish", "Softplus", "Softsign", "Gelu", "Mish", "Abs", "Neg", "Exp"};
  if (!n.domain.empty() || n.outputs.size() != 1) return false;
  for (const char* op : kOps)
    if (n.op_type == op) return n.num_inputs() == 1;
  return false;
}

// A per-tensor Q/DQ with static scale (and zero point) of 8-bit dtype `*dt`.
bool PerTensorStatic(const Graph& g, const std::vector<bool>& st, const Node& n, DType* dt) {
  if (!n.domain.empty() || !n.HasInput(1) || !st[n.inputs[1]] || n.GetInt("block_size", 0) != 0) return false;
  const Value& s = g.values[n.inputs[1]];
  if (!s.has_shape || s.dims.size() > 1 || (s.dims.size() == 1 && s.dims[0].value != 1)) return false;
  if (n.HasInput(2) && !st[n.inputs[2]]) return false;
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
  for (size_t i = 0; i < original; ++i) {
    const Node& f = g->nodes[i];
    if (!IsLookupOp(f) || f.inputs[0] < 0 || producer[f.inputs[0]] < 0) continue;
    const Node& dq = g->nodes[producer[f.inputs[0]]];
    DType xdt, ydt;
    if (dq.op_type != "DequantizeLinear" || !PerTensorStatic(*g, st, dq, &xdt) || st[dq.inputs[0]]) continue;
    const int y = f.outputs[0];
    if (uses[y] != 1 || IsGraphOutput(*g, y) || consumers[y].size() != 1) continue;
    const Node& q = g->nodes[consumers[y][0]];
    if (q.op_type != "QuantizeLinear" || q.inputs[0] != y || !PerTensorStatic(*g, st, q, &ydt) ||
        q.GetInt("output_dtype", 0) != 0)
      continue;
    // The 256 raw bytes of x's dtype, in byte order (int8: 0..127, -128..-1).
    Tensor codes(xdt, {256});
    for (int b = 0; b < 256; ++b) static_cast<uint8_t*>(codes.data())[b] = static_cast<uint8_t>(b);
    const std::string base = f.name.empty() ? "qlookup" : f.name;
    const int x = dq.inputs[0], q_node = consumers[y][0];
    const std::map<std::string, Attribute> dq_attrs = dq.attrs, f_attrs = f.attrs, q_attrs = q.attrs;
    const std::vector<int> dq_in = dq.inputs, q_in = q.inputs;
    const std::string f_op = f.op_type;
    const int out = q.outputs[0];
    std::vector<int> ins = dq_in;
    ins[0] = AddConstant(g, std::move(codes), base + "_codes");
    const int t_dq = AddOp(g, "DequantizeLinear", ins, base + "_codes_dq");
    g->nodes.back().attrs = dq_attrs;
    const int t_f = AddOp(g, f_op, {t_dq}, base + "_codes_f");
    g->nodes.back().attrs = f_attrs;
    ins = q_in;
    ins[0] = t_f;
    const int table = AddOp(g, "QuantizeLinear", ins, base + "_table");
    g->nodes.back().attrs = q_attrs;
    Node lookup;
    lookup.op_type = "QLookup";
    lookup.domain = "kaiwu";
    lookup.opset = 1;
    lookup.name = base + "_lookup";
    lookup.inputs = {x, table};
    lookup.outputs = {out};
    MarkRemoved(&g->nodes[i]);
    MarkRemoved(&g->nodes[q_node]);
    g->AddNode(std::move(lookup));
    ++fired;
  }
  if (fired) RemoveMarkedNodes(g);
  return fired;
}

}  // namespace kaiwu
