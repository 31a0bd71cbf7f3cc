#include "passes/pass_manager.h"

namespace kaiwu {

void Optimize(Graph* graph, PassStats* stats) {
  (void)stats;
  graph->RemoveDeadNodes();
}

}  // namespace kaiwu
