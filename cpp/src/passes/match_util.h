// Read-only pattern-matching helpers shared by the rewrite rules added for the
// optimizer issue: producers, constant operands, attribute equality.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"

namespace kaiwu {

/// Per value, the index of the node that writes it, or -1.
std::vector<int> Producers(const Graph& g);
/// The integer data of a structural constant (int32 or int64), or false.
bool ConstInts(const Graph& g, int v, std::vector<int64_t>* out);
/// The float data of a structural constant or weight known at rewrite time, or false.
bool ConstFloats(const Graph& g, int v, std::vector<float>* out);
/// True when `v` is a structural constant holding the single number `x`.
bool IsConstScalar(const Graph& g, int v, double x);
/// True when `t` holds the single number `x`.
bool TensorIsScalar(const Tensor& t, double x);
/// The node writing `v` if it has op type `op` and `v` has exactly one reader
/// (and is no graph output); nullptr otherwise.
const Node* SoleProducer(const Graph& g, const std::vector<int>& producer,
                         const std::vector<int>& uses, int v, const char* op);
/// The index of the one node reading `v` when `v` has exactly one reader (per
/// `uses`, UseCounts) and is no graph output; -1 otherwise.
int SoleReader(const Graph& g, const std::vector<int>& uses, int v);
/// Same attributes (kind and value) on both nodes.
bool SameAttributes(const Node& a, const Node& b);
/// The declared rank of a value, or -1.
int KnownRank(const Graph& g, int v);

}  // namespace kaiwu
