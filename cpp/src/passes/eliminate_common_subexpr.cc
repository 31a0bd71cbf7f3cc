// Common-subexpression elimination: two nodes with the same op, domain, inputs
// and attributes compute the same outputs; readers of the later one read the
// earlier one's. Nodes with tensor attributes, random ops and nodes writing a
// graph output are left alone.
#include <map>
#include <tuple>

#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

namespace {
bool Deterministic(const Node& n) {
  return n.op_type.rfind("Random", 0) != 0 && n.op_type != "Multinomial" && n.op_type != "Dropout";
}
}  // namespace

int EliminateCommonSubexpr(Graph* g) {
  int fired = 0;
  // (op, domain, inputs) -> node indices seen so far; nodes are topologically sorted.
  std::map<std::tuple<std::string, std::string, std::vector<int>>, std::vector<int>> seen;
  for (size_t i = 0; i < g->nodes.size(); ++i) {
    Node& n = g->nodes[i];
    if (n.inputs.empty() || !Deterministic(n) || n.op_type == "_removed") continue;
    bool output_is_graph_output = false;
    for (int o : n.outputs) output_is_graph_output = output_is_graph_output || (o >= 0 && IsGraphOutput(*g, o));
    auto& bucket = seen[{n.op_type, n.domain, n.inputs}];
    int twin = -1;
    for (int j : bucket) {
      const Node& m = g->nodes[j];
      if (m.outputs.size() == n.outputs.size() && SameAttributes(m, n)) {
        twin = j;
        break;
      }
    }
    if (twin < 0 || output_is_graph_output) {
      bucket.push_back(static_cast<int>(i));
      continue;
    }
    bool usable = true;  // every output we need must exist on the twin
    for (size_t k = 0; k < n.outputs.size(); ++k)
      usable = usable && (n.outputs[k] < 0 || g->nodes[twin].outputs[k] >= 0);
    if (!usable) {
      bucket.push_back(static_cast<int>(i));
      continue;
    }
    for (size_t k = 0; k < n.outputs.size(); ++k)
      if (n.outputs[k] >= 0) ReplaceUses(g, n.outputs[k], g->nodes[twin].outputs[k]);
    MarkRemoved(&g->nodes[i]);
    ++fired;
  }
  if (fired) RemoveMarkedNodes(g);
  return fired;
}

}  // namespace kaiwu
