// CPU sessions, after the layout pass (OptimizeForCpu): Transpose(Cast(x))
// where the Cast widens 1-byte integers (uint8 frames) to float32 and feeds
// only the Transpose becomes Cast(Transpose(x)), so the transpose moves a
// quarter of the bytes. The layout pass sinks transposes the other way, so
// this runs once after it, never inside its loop.
#include <utility>

#include "ops/binary.h"
#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

namespace {

// One rewrite, or false when none is left.
bool HoistOne(Graph* g) {
  const std::vector<int> producer = Producers(*g);
  const std::vector<int> uses = UseCounts(*g);
  for (size_t i = 0; i < g->nodes.size(); ++i) {
    const Node& t = g->nodes[i];
    if (t.op_type != "Transpose" || !t.domain.empty() || !t.HasInput(0) || t.outputs.size() != 1)
      continue;
    const int v = t.inputs[0];
    const int p = producer[v];
    if (p < 0 || uses[v] != 1 || IsGraphOutput(*g, v)) continue;
    const Node& cast = g->nodes[p];
    if (cast.op_type != "Cast" || !cast.domain.empty() || !cast.HasInput(0)) continue;
    const int x = cast.inputs[0];
    const DType from = g->values[x].dtype;
    if ((from != DType::kUInt8 && from != DType::kInt8) ||
        DTypeFromOnnxCode(cast.GetInt("to", 0)) != DType::kFloat32)
      continue;
    // x -> Transpose -> xt (1-byte) -> Cast -> the Transpose's old output.
    const int y = t.outputs[0];
    const int xt = AddIntermediate(g, g->values[y].name + "_bytes");
    g->values[xt].dtype = from;
    Node& tn = g->nodes[i];
    tn.inputs[0] = x;
    tn.outputs[0] = xt;
    Node& cn = g->nodes[p];
    cn.inputs[0] = xt;
    cn.outputs[0] = y;
    // The Transpose now runs where the Cast did (x was ready there), the Cast
    // where the Transpose did (before every reader of y).
    std::swap(g->nodes[i], g->nodes[p]);
    return true;
  }
  return false;
}

}  // namespace

int HoistTransposeAboveCast(Graph* g) {
  int fired = 0;
  while (HoistOne(g)) ++fired;
  if (fired) g->Verify();
  return fired;
}

}  // namespace kaiwu
