// Q(Add(DQ(a), DQ(b))) with every scale and zero point a static scalar (a
// residual block's sum in a QDQ model) becomes kaiwu QLinearAdd(a, a_scale,
// a_zp, b, b_scale, b_zp, y_scale, y_zp): one pass over the bytes of a and b
// that computes the same float operations (each DQ, their sum, the Q) per
// element, instead of four passes over float tensors. The DQs stay where
// other nodes read them. CPU sessions, after the int8 layout pass.
#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {
namespace {

bool Bytes(DType t) { return t == DType::kUInt8 || t == DType::kInt8; }

// The dtype of a DQ's input: its zero point's (values made by earlier
// rewrites may not carry a dtype yet), else the input's own, else uint8 when
// a QuantizeLinear without zero point writes it.
DType DqInputDType(const Graph& g, const std::vector<int>& producer, const Node& dq) {
  if (dq.HasInput(2)) return g.values[dq.inputs[2]].dtype;
  const int x = dq.inputs[0];
  if (g.values[x].dtype != DType::kUndefined || producer[x] < 0) return g.values[x].dtype;
  const Node& q = g.nodes[producer[x]];
  const bool plain_q = q.op_type == "QuantizeLinear" && q.domain.empty() && !q.HasInput(2) &&
                       q.GetInt("output_dtype", 0) == 0;
  return plain_q ? DType::kUInt8 : DType::kUndefined;
}

// A per-tensor Q / DQ (no blocks) with static scalar scale and zero point.
bool PerTensor(const Graph& g, const std::vector<bool>& st, const Node& n) {
  return n.domain.empty() && n.outputs.size() == 1 && n.GetInt("block_size", 0) == 0 && n.HasInput(1) &&
         StaticScalar(g, st, n.inputs[1]) && (!n.HasInput(2) || StaticScalar(g, st, n.inputs[2]));
}

}  // namespace

int FuseQdqAdd(Graph* g) {
  int fired = 0;
  const std::vector<int> producer = Producers(*g);
  const std::vector<int> uses = UseCounts(*g);
  const std::vector<bool> st = StaticValues(*g);
  const size_t original = g->nodes.size();
  for (size_t qi = 0; qi < original; ++qi) {
    const Node& q = g->nodes[qi];
    if (q.op_type != "QuantizeLinear" || !PerTensor(*g, st, q) || q.GetInt("output_dtype", 0) != 0) continue;
    const DType ydt = q.HasInput(2) ? g->values[q.inputs[2]].dtype : DType::kUInt8;
    const int s = q.inputs[0];
    if (!Bytes(ydt) || producer[s] < 0 || uses[s] != 1 || IsGraphOutput(*g, s)) continue;
    const int ai = producer[s];
    const Node& add = g->nodes[ai];
    if (add.op_type != "Add" || !add.domain.empty() || add.num_inputs() != 2 || add.inputs[0] < 0 ||
        add.inputs[1] < 0)
      continue;
    int dqs[2];
    bool ok = true;
    for (int k = 0; k < 2 && ok; ++k) {
      const int v = add.inputs[k];
      dqs[k] = producer[v];
      if (dqs[k] < 0) {
        ok = false;
        break;
      }
      const Node& dq = g->nodes[dqs[k]];
      ok = dq.op_type == "DequantizeLinear" && PerTensor(*g, st, dq) && !st[dq.inputs[0]] &&
           Bytes(DqInputDType(*g, producer, dq)) &&
           (g->values[dq.inputs[1]].dtype == DType::kFloat32 || g->values[dq.inputs[1]].dtype == DType::kUndefined);
    }
    if (!ok) continue;
    const Node dqa = g->nodes[dqs[0]], dqb = g->nodes[dqs[1]], qc = q, addc = add;
    Node fused;
    fused.op_type = "QLinearAdd";
    fused.domain = "kaiwu";
    fused.opset = 1;
    fused.name = addc.name.empty() ? qc.name + "_qadd" : addc.name + "_qadd";
    fused.inputs = {dqa.inputs[0], dqa.inputs[1], dqa.HasInput(2) ? dqa.inputs[2] : -1,
                    dqb.inputs[0], dqb.inputs[1], dqb.HasInput(2) ? dqb.inputs[2] : -1,
                    qc.inputs[1],  qc.HasInput(2) ? qc.inputs[2] : -1};
    fused.outputs = {qc.outputs[0]};
    // A DQ whose only readers are this Add goes too.
    for (int k = 0; k < 2; ++k) {
      if (k == 1 && dqs[1] == dqs[0]) break;
      const int v = addc.inputs[k];
      const int reads = (addc.inputs[0] == v) + (addc.inputs[1] == v);
      if (uses[v] == reads && !IsGraphOutput(*g, v)) MarkRemoved(&g->nodes[dqs[k]]);
    }
    MarkRemoved(&g->nodes[ai]);
    MarkRemoved(&g->nodes[qi]);
    g->AddNode(std::move(fused));
    ++fired;
  }
  if (fired) RemoveMarkedNodes(g);
  return fired;
}

}  // namespace kaiwu
