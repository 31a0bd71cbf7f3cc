#include "passes/match_util.h"

#include <algorithm>

#include "passes/rewrite_util.h"

namespace kaiwu {

std::vector<int> Producers(const Graph& g) {
  std::vector<int> producer(g.values.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int o : g.nodes[i].outputs)
      if (o >= 0) producer[o] = static_cast<int>(i);
  return producer;
}

bool ConstInts(const Graph& g, int v, std::vector<int64_t>* out) {
  if (v < 0) return false;
  const Value& val = g.values[v];
  if (val.kind != ValueKind::kConstant || !val.data) return false;
  const Tensor& t = *val.data;
  out->resize(static_cast<size_t>(t.size()));
  if (t.dtype() == DType::kInt64) {
    std::copy(t.As<int64_t>(), t.As<int64_t>() + t.size(), out->begin());
  } else if (t.dtype() == DType::kInt32) {
    std::copy(t.As<int32_t>(), t.As<int32_t>() + t.size(), out->begin());
  } else {
    return false;
  }
  return true;
}

bool ConstFloats(const Graph& g, int v, std::vector<float>* out) {
  if (v < 0) return false;
  const Value& val = g.values[v];
  if (val.kind != ValueKind::kConstant || !val.data) return false;
  const Tensor& t = *val.data;
  if (t.dtype() != DType::kFloat32) return false;
  out->assign(t.As<float>(), t.As<float>() + t.size());
  return true;
}

bool IsConstScalar(const Graph& g, int v, double x) {
  if (v < 0) return false;
  const Value& val = g.values[v];
  if (val.kind != ValueKind::kConstant || !val.data) return false;
  return TensorIsScalar(*val.data, x);
}

bool TensorIsScalar(const Tensor& t, double x) {
  if (t.size() != 1) return false;
  switch (t.dtype()) {
    case DType::kFloat32: return t.As<float>()[0] == static_cast<float>(x);
    case DType::kFloat64: return t.As<double>()[0] == x;
    case DType::kInt32: return t.As<int32_t>()[0] == static_cast<int32_t>(x);
    case DType::kInt64: return t.As<int64_t>()[0] == static_cast<int64_t>(x);
    default: return false;
  }
}

int SoleReader(const Graph& g, const std::vector<int>& uses, int v) {
  if (v < 0 || uses[v] != 1 || IsGraphOutput(g, v)) return -1;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int in : g.nodes[i].inputs)
      if (in == v) return static_cast<int>(i);
  return -1;
}

const Node* SoleProducer(const Graph& g, const std::vector<int>& producer,
                         const std::vector<int>& uses, int v, const char* op) {
  if (v < 0 || producer[v] < 0 || uses[v] != 1 || IsGraphOutput(g, v)) return nullptr;
  const Node& n = g.nodes[producer[v]];
  if (n.op_type != op || !n.domain.empty()) return nullptr;
  return &n;
}

bool SameAttributes(const Node& a, const Node& b) {
  if (a.attrs.size() != b.attrs.size()) return false;
  for (const auto& [name, x] : a.attrs) {
    auto it = b.attrs.find(name);
    if (it == b.attrs.end()) return false;
    const Attribute& y = it->second;
    if (x.kind != y.kind || x.i != y.i || x.s != y.s || x.ints != y.ints ||
        x.strings != y.strings)
      return false;
    // Bitwise float comparison: NaN attributes never match, -0 and 0 differ.
    if (!(x.f == y.f) || x.floats.size() != y.floats.size()) return false;
    for (size_t k = 0; k < x.floats.size(); ++k)
      if (!(x.floats[k] == y.floats[k])) return false;
    if (x.t || y.t) return false;  // tensor attributes: never assumed equal
  }
  return true;
}

int KnownRank(const Graph& g, int v) {
  if (v < 0 || !g.values[v].has_shape) return -1;
  return static_cast<int>(g.values[v].dims.size());
}

}  // namespace kaiwu
