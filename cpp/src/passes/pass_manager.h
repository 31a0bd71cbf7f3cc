// Graph rewrites run at load when optimize=True. Each rule is small and lives
// in its own file; the manager repeats them until nothing changes and counts
// what fired so that Session::Describe can show it.
#pragma once

#include <map>
#include <string>

#include "ir/graph.h"

namespace kaiwu {

struct PassStats {
  std::map<std::string, int> fired;  // rule name -> times applied
};

/// Rewrites `graph` in place. Rules that touch weights express derived weights
/// as graph nodes over the originals, so refit recomputes them.
void Optimize(Graph* graph, PassStats* stats);

/// Rewrites for sessions that run on the CPU, after Optimize: prepacked
/// weights for the CPU kernels (PrepackGemmWeights), counted in `stats`.
void OptimizeForCpu(Graph* graph, PassStats* stats);

}  // namespace kaiwu
