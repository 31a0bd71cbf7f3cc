// MaxPool(DQ(x)) -> DQ(MaxPool(x)) (MaxPool or kaiwu NhwcMaxPool) for a
// per-tensor DequantizeLinear read only by the pool, whose scale is positive:
// DQ is then nondecreasing, so the max of the dequantized window is the
// dequantized max of the window's bytes, exactly. The pool moves bytes
// instead of floats, and the Q after it (IMPALA's DQ -> MaxPool -> Q)
// becomes a byte table lookup when fuse_qdq_lookup runs again. CPU sessions
// (their pools take uint8 and int8), after the int8 layout pass. Assumes the
// scale stays positive across refits, as every quantizer writes it.
#include <cmath>

#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

int HoistMaxPoolAboveDequantize(Graph* g) {
  int fired = 0;
  const std::vector<int> producer = Producers(*g);
  const std::vector<int> uses = UseCounts(*g);
  const std::vector<bool> st = StaticValues(*g);
  for (size_t i = 0; i < g->nodes.size(); ++i) {
    const Node& pool = g->nodes[i];
    const bool nchw = pool.op_type == "MaxPool" && pool.domain.empty();
    const bool nhwc = pool.op_type == "NhwcMaxPool" && pool.domain == "kaiwu";
    if ((!nchw && !nhwc) || !pool.HasInput(0) || pool.outputs.empty() || pool.outputs[0] < 0) continue;
    if (pool.outputs.size() > 1 && pool.outputs[1] >= 0) continue;  // MaxPool's Indices
    const int dq = SoleDequantize(*g, producer, uses, st, pool.inputs[0]);
    if (dq < 0) continue;
    const Node& d = g->nodes[dq];
    // The scale's value now (a constant or a weight's load-time data).
    const Value& sv = g->values[d.inputs[1]];
    if (!sv.data || sv.data->dtype() != DType::kFloat32 || sv.data->size() != 1) continue;
    const float scale = sv.data->As<float>()[0];
    if (!(scale > 0.f) || !std::isfinite(scale)) continue;
    const int x = d.inputs[0];
    // x's dtype is its zero point's (values made by earlier rewrites may not carry one yet).
    const DType xdt = d.HasInput(2) ? g->values[d.inputs[2]].dtype : g->values[x].dtype;
    if (st[x] || (xdt != DType::kUInt8 && xdt != DType::kInt8)) continue;
    HoistAboveDequantize(g, static_cast<int>(i), dq, xdt);
    ++fired;
  }
  if (fired) g->Verify();
  return fired;
}

}  // namespace kaiwu
