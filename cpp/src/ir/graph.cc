#include "ir/graph.h"

#include <algorithm>
#include <queue>
#include <set>

namespace kaiwu {

namespace {
const Attribute* FindAttr(const Node& n, const std::string& attr) {
  auto it = n.attrs.find(attr);
  return it == n.attrs.end() ? nullptr : &it->second;
}
}  // namespace

int64_t Node::GetInt(const std::string& attr, int64_t fallback) const {
  const Attribute* a = FindAttr(*this, attr);
  return a ? a->i : fallback;
}
float Node::GetFloat(const std::string& attr, float fallback) const {
  const Attribute* a = FindAttr(*this, attr);
  if (!a) return fallback;
  return a->kind == Attribute::Kind::kInt ? static_cast<float>(a->i) : a->f;
}
std::string Node::GetString(const std::string& attr, const std::string& fallback) const {
  const Attribute* a = FindAttr(*this, attr);
  return a ? a->s : fallback;
}
std::vector<int64_t> Node::GetInts(const std::string& attr, std::vector<int64_t> fallback) const {
  const Attribute* a = FindAttr(*this, attr);
  return a ? a->ints : fallback;
}
std::vector<float> Node::GetFloats(const std::string& attr, std::vector<float> fallback) const {
  const Attribute* a = FindAttr(*this, attr);
  return a ? a->floats : fallback;
}
std::string Node::Describe() const {
  return op_type + " node '" + name + "'";
}

int Graph::AddValue(Value v) {
  int id = static_cast<int>(values.size());
  if (!v.name.empty()) by_name_[v.name] = id;
  values.push_back(std::move(v));
  return id;
}

int Graph::Find(const std::string& value_name) const {
  auto it = by_name_.find(value_name);
  return it == by_name_.end() ? -1 : it->second;
}

int Graph::AddNode(Node n) {
  nodes.push_back(std::move(n));
  return static_cast<int>(nodes.size()) - 1;
}

std::vector<std::vector<int>> Graph::Consumers() const {
  std::vector<std::vector<int>> users(values.size());
  for (size_t i = 0; i < nodes.size(); ++i)
    for (int v : nodes[i].inputs)
      if (v >= 0) users[v].push_back(static_cast<int>(i));
  return users;
}

void Graph::Verify() {
  // Producers, and at most one producer per value.
  for (auto& v : values) v.producer = -1;
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (int o : nodes[i].outputs) {
      if (o < 0) continue;
      Value& v = values[o];
      KAIWU_CHECK(v.kind == ValueKind::kRuntime, StatusCode::kModel, nodes[i].Describe(),
                  " writes '", v.name, "', which is already a graph input or initializer");
      KAIWU_CHECK(v.producer < 0, StatusCode::kModel, "value '", v.name,
                  "' is produced by two nodes: ", nodes[v.producer].Describe(), " and ",
                  nodes[i].Describe());
      v.producer = static_cast<int>(i);
    }
  }
  for (const Node& n : nodes)
    for (int in : n.inputs)
      if (in >= 0 && values[in].kind == ValueKind::kRuntime && values[in].producer < 0)
        Fail(StatusCode::kModel, n.Describe(), " reads '", values[in].name,
             "', which no node produces and which is neither a graph input nor an initializer");
  for (int o : outputs)
    if (values[o].kind == ValueKind::kRuntime && values[o].producer < 0)
      Fail(StatusCode::kModel, "graph output '", values[o].name, "' has no producer");

  // Kahn's algorithm; nodes left over sit on a cycle.
  std::vector<int> pending(nodes.size(), 0);
  std::vector<std::vector<int>> next(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    std::set<int> deps;
    for (int in : nodes[i].inputs)
      if (in >= 0 && values[in].producer >= 0) deps.insert(values[in].producer);
    pending[i] = static_cast<int>(deps.size());
    for (int d : deps) next[d].push_back(static_cast<int>(i));
  }
  std::queue<int> ready;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (pending[i] == 0) ready.push(static_cast<int>(i));
  std::vector<int> order;
  while (!ready.empty()) {
    int i = ready.front();
    ready.pop();
    order.push_back(i);
    for (int j : next[i])
      if (--pending[j] == 0) ready.push(j);
  }
  if (order.size() != nodes.size()) {
    std::string names;
    for (size_t i = 0; i < nodes.size(); ++i)
      if (pending[i] > 0) names += (names.empty() ? "" : ", ") + nodes[i].Describe();
    Fail(StatusCode::kModel, "the graph has a cycle through: ", names);
  }
  std::vector<Node> sorted;
  sorted.reserve(nodes.size());
  for (int i : order) sorted.push_back(std::move(nodes[i]));
  nodes = std::move(sorted);
  for (size_t i = 0; i < nodes.size(); ++i)
    for (int o : nodes[i].outputs)
      if (o >= 0) values[o].producer = static_cast<int>(i);
}

void Graph::RemoveDeadNodes() {
  std::vector<bool> needed(values.size(), false);
  for (int o : outputs) needed[o] = true;
  std::vector<bool> keep(nodes.size(), false);
  for (int i = static_cast<int>(nodes.size()) - 1; i >= 0; --i) {
    for (int o : nodes[i].outputs)
      if (o >= 0 && needed[o]) keep[i] = true;
    if (keep[i])
      for (int in : nodes[i].inputs)
        if (in >= 0) needed[in] = true;
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (keep[i]) kept.push_back(std::move(nodes[i]));
  nodes = std::move(kept);
  for (auto& v : values) v.producer = -1;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (int o : nodes[i].outputs)
      if (o >= 0) values[o].producer = static_cast<int>(i);
}

bool IsShapeOperand(const std::string& op, int index) {
  if (index == 0) return op == "ConstantOfShape" || op == "Range";
  if (op == "Reshape" || op == "Expand" || op == "Tile" || op == "Split" || op == "Squeeze" ||
      op == "Unsqueeze" || op == "TopK" || op == "OneHot" || op == "Upsample" ||
      op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax" || op == "ReduceMin" ||
      op == "ReduceProd" || op == "ReduceL1" || op == "ReduceL2" || op == "ReduceLogSumExp" ||
      op == "ReduceSumSquare" || op == "ReduceLogSum" || op == "CumSum")
    return index == 1;
  if (op == "Slice") return index >= 1;
  if (op == "Pad") return index == 1 || index == 3;
  if (op == "Resize") return index >= 1;
  if (op == "Range") return true;
  return false;
}

}  // namespace kaiwu
