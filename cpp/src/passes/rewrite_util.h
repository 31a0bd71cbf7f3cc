// Small graph-surgery helpers shared by rewrite rules.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace kaiwu {

/// Adds a structural constant and returns its value id.
int AddConstant(Graph* g, Tensor t, const std::string& name_hint);
/// Adds a 1-D int64 constant (shapes, pads, axes) and returns its value id.
int AddInts(Graph* g, std::vector<int64_t> vals, const std::string& name_hint);
/// Adds an empty runtime value (its producer is added by the caller).
int AddIntermediate(Graph* g, const std::string& name_hint);
/// Adds a node computing `op_type` over `inputs`, returning its single output id.
int AddOp(Graph* g, const std::string& op_type, std::vector<int> inputs, const std::string& name_hint);
/// Node attributes of one integer and of a list of integers.
Attribute IntAttr(int64_t v);
Attribute IntsAttr(std::vector<int64_t> v);
/// Makes every reader of `from` (and the graph outputs) read `to` instead.
void ReplaceUses(Graph* g, int from, int to);
/// How many node inputs and graph outputs read each value.
std::vector<int> UseCounts(const Graph& g);
/// Values known without any graph input: weights, constants and nodes over them.
std::vector<bool> StaticValues(const Graph& g);
/// A static value (`st` from StaticValues) of one element by its recorded
/// shape: a per-tensor scale or zero point.
bool StaticScalar(const Graph& g, const std::vector<bool>& st, int v);
/// Forgets the recorded shape of `v`, whose layout a rewrite changed (shape
/// inference at plan time says it again).
void ForgetShape(Graph* g, int v);
bool IsGraphOutput(const Graph& g, int v);
/// Every dim of `v` known: those of its data, or its recorded shape when no
/// dim is symbolic. False otherwise.
bool KnownDims(const Graph& g, int v, std::vector<int64_t>* dims);
/// Dims of a static value (a conv weight): those of its data or recorded
/// shape, looking through the static nodes that derive it from input 0
/// elementwise (a folded scale or BatchNorm: Mul, Div; a Cast) and through
/// Transposes. False when none of these says.
bool StaticDims(const Graph& g, const std::vector<int>& producer, int v,
                std::vector<int64_t>* dims);
/// The node index of the per-tensor DequantizeLinear (no blocks, static scalar
/// scale and zero point) that writes `v`, when v is read once and is no graph
/// output; -1 otherwise (`uses` from UseCounts, `st` from StaticValues).
int SoleDequantize(const Graph& g, const std::vector<int>& producer, const std::vector<int>& uses,
                   const std::vector<bool>& st, int v);
/// op(DQ(x)) -> DQ(op(x)): node `op` reads the output of DequantizeLinear node
/// `dq` (from SoleDequantize) at input 0 and writes output 0; afterwards op
/// reads x and writes that value, now of dtype `x_dtype`, which dq reads.
void HoistAboveDequantize(Graph* g, int op, int dq, DType x_dtype);
/// Marks a node for removal (it reads and writes nothing from now on).
void MarkRemoved(Node* n);
/// Drops marked nodes and re-verifies the graph.
void RemoveMarkedNodes(Graph* g);

}  // namespace kaiwu
