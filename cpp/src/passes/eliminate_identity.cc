#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

int EliminateIdentity(Graph* g) {
  int fired = 0;
  for (Node& n : g->nodes) {
    bool identity = n.op_type == "Identity" ||
                    (n.op_type == "Dropout" && (n.outputs.size() < 2 || n.outputs[1] < 0) &&
                     !n.HasInput(2));  // training_mode input absent: inference
    if (!identity || n.inputs.empty() || n.inputs[0] < 0 || n.outputs[0] < 0) continue;
    int in = n.inputs[0], out = n.outputs[0];
    // A graph output must keep its name; a graph input passed straight out needs the copy.
    if (IsGraphOutput(*g, out)) continue;
    ReplaceUses(g, out, in);
    n.outputs.clear();
    n.inputs.clear();
    MarkRemoved(&n);
    ++fired;
  }
  if (fired) RemoveMarkedNodes(g);
  return fired;
}

}  // namespace kaiwu
