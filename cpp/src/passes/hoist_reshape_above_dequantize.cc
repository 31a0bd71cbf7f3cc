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
  for (size_t i = 0; i < g->nodes.size(); ++i) {
    const Node& rs = g->nodes[i];
    if ((rs.op_type != "Reshape" && rs.op_type != "Flatten") || !rs.domain.empty() || !rs.HasInput(0) ||
        rs.outputs.size() != 1)
      continue;
    const int dq = SoleDequantize(*g, producer, uses, st, rs.inputs[0]);
    if (dq < 0) continue;
    const int x = g->nodes[dq].inputs[0];
    if (st[x]) continue;  // static data: constant folding's business
    HoistAboveDequantize(g, static_cast<int>(i), dq, g->values[x].dtype);
    ++fired;
  }
  if (fired) g->Verify();
  return fired;
}

}  // namespace kaiwu
