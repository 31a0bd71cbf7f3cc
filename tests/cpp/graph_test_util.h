// Building blocks of the hand-built graphs in the optimizer-pass tests.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace kaiwu {
namespace testing {

/// A default-domain node of `op` over value ids; named op + its first output id.
inline Node GraphOp(const std::string& op, std::vector<int> in, std::vector<int> out) {
  Node n;
  n.op_type = op;
  n.name = op + std::to_string(out.empty() ? 0 : out[0]);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

/// How many nodes of `g` have op type `op`.
inline int CountOps(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.op_type == op ? 1 : 0;
  return n;
}

}  // namespace testing
}  // namespace kaiwu
