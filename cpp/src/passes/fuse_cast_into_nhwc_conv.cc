// CPU sessions, after the layout pass (OptimizeForCpu): Cast(x uint8 -> float32)
// read only by an NhwcConv's input becomes the conv reading x itself, which it
// widens to float32 as it copies each image into its own buffer (in cache).
// The Cast wrote the whole batch as float32 to memory for the conv to read it
// back: four times the bytes of x, twice, for every uint8 frame policy.
#include <vector>

#include "ops/binary.h"
#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

int FuseCastIntoNhwcConv(Graph* g) {
  const std::vector<int> producer = Producers(*g);
  const std::vector<int> uses = UseCounts(*g);
  int fired = 0;
  for (Node& conv : g->nodes) {
    if (conv.op_type != "NhwcConv" || conv.domain != "kaiwu" || conv.inputs.empty() ||
        conv.inputs[0] < 0)
      continue;
    const int v = conv.inputs[0];
    const int p = producer[v];
    if (p < 0 || uses[v] != 1 || IsGraphOutput(*g, v)) continue;
    Node& cast = g->nodes[p];
    if (cast.op_type != "Cast" || !cast.domain.empty() || !cast.HasInput(0)) continue;
    const int x = cast.inputs[0];
    // A float32 X: W is float32 too (the conv's shape inference checks it).
    if (g->values[x].dtype != DType::kUInt8 ||
        DTypeFromOnnxCode(cast.GetInt("to", 0)) != DType::kFloat32)
      continue;
    conv.inputs[0] = x;
    MarkRemoved(&cast);
    ++fired;
  }
  if (fired) RemoveMarkedNodes(g);
  return fired;
}

}  // namespace kaiwu
