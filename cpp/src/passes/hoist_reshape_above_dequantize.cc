// Reshape(DQ(x)) -> DQ(Reshape(x)) (likewise Flatten) for a per-tensor
// DequantizeLinear read only by the Reshape: a per-tensor DQ is elementwise,
// so it commutes with a Reshape, which then moves bytes instead of floats (a
// view either way). Made for the QDQ export of Conv -> Flatten -> Gemm, where
// onnxruntime's quantizer writes DQ -> Flatten -> Q -> DQ -> Gemm: afterwards
// fuse_qdq_lookup turns DQ -> Q into a byte table lookup, and no float tensor
// is left between the integer Conv and the integer Gemm.
#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {
int HoistReshapeAboveDequantize(Graph* g) {
  int fired = 0;
  const std::vector<int> producer = Producers(*g);
  const std::vector<int> uses = UseCounts(*g);
  const std::vector<bool> st = StaticValues(*g);
  for (Node& rs : g->nodes) {
    if ((rs.op_type != "Reshape" && rs.op_type != "Flatten") || !rs.domain.empty() || !rs.HasInput(0) ||
        rs.outputs.size() != 1)
      continue;
    const int d = rs.inputs[0];
    if (producer[d] < 0 || uses[d] != 1 || IsGraphOutput(*g, d)) continue;
    Node& dq = g->nodes[producer[d]];
    if (dq.op_type != "DequantizeLinear" || !dq.domain.empty() || dq.outputs.size() != 1 ||
        dq.GetInt("block_size", 0) != 0 || !dq.HasInput(1) || !StaticScalar(*g, st, dq.inputs[1]) ||
        (dq.HasInput(2) && !StaticScalar(*g, st, dq.inputs[2])))
      continue;
    const int x = dq.inputs[0], out = rs.outputs[0];
    if (st[x]) continue;  // static data: constant folding's business
    // x -> rs -> d -> dq -> out
    rs.inputs[0] = x;
    rs.outputs[0] = d;
    dq.inputs[0] = d;
    dq.outputs[0] = out;
    g->values[d].dtype = g->values[x].dtype;  // now the reshaped quantized bytes
    ForgetShape(g, d);
    ++fired;
  }
  if (fired) g->Verify();
  return fired;
}

}  // namespace kaiwu
