// Building blocks of the hand-built graphs in the optimizer-pass tests.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/op.h"

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

/// A float32 value of `kind` added to `g`; with rank >= 0, a declared shape of that
/// many unknown dims (a known rank, as an exporter's value_info gives).
inline int AddFloatValue(Graph& g, const std::string& name, ValueKind kind, int rank = -1) {
  Value v;
  v.name = name;
  v.kind = kind;
  v.dtype = DType::kFloat32;
  if (rank >= 0) {
    v.has_shape = true;
    for (int d = 0; d < rank; ++d) v.dims.push_back(Dim{-1, "d" + std::to_string(d)});
  }
  return g.AddValue(v);
}

/// How many nodes of `g` have op type `op`.
inline int CountOps(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.op_type == op ? 1 : 0;
  return n;
}

/// The first node of `g` with op type `op`, or null.
inline const Node* FirstOp(const Graph& g, const std::string& op) {
  for (const Node& n : g.nodes)
    if (n.op_type == op) return &n;
  return nullptr;
}

/// A string attribute.
inline Attribute StrAttrOf(const std::string& v) {
  Attribute a;
  a.kind = Attribute::Kind::kString;
  a.s = v;
  return a;
}

/// A pass's has_kernel(op, dtype) for a backend that runs everything.
inline bool AnyKernel(OpId, DType) { return true; }

}  // namespace testing
}  // namespace kaiwu
