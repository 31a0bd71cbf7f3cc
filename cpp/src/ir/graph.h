// The graph IR: values (tensors by name), nodes (ops with attributes) and the
// graph that owns both. Importers build it, passes rewrite it, the planner reads it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kaiwu/status.h"
#include "kaiwu/tensor.h"

namespace kaiwu {

struct Attribute {
  enum class Kind { kInt, kFloat, kString, kInts, kFloats, kStrings, kTensor };
  Kind kind = Kind::kInt;
  int64_t i = 0;
  float f = 0.f;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strings;
  std::shared_ptr<Tensor> t;
};

/// One dimension as declared by the model: a number, or a symbol such as "batch".
struct Dim {
  int64_t value = -1;  // -1: not known statically
  std::string symbol;  // empty unless the model names the dimension
};

/// How a value gets its data.
enum class ValueKind {
  kRuntime,   ///< computed by a node each run
  kInput,     ///< fed by the caller
  kWeight,    ///< a refittable initializer, owned by the WeightStore
  kConstant,  ///< a structural constant (shape tensors, Constant nodes): never refit
};

struct Value {
  std::string name;
  ValueKind kind = ValueKind::kRuntime;
  DType dtype = DType::kUndefined;
  bool has_shape = false;
  std::vector<Dim> dims;         // declared or inferred static shape
  std::shared_ptr<Tensor> data;  // for kWeight and kConstant
  int producer = -1;             // node index, -1 for inputs and initializers
};

class Node {
 public:
  std::string op_type;
  std::string domain;  // "" for the default ONNX domain, "kaiwu" for fused ops
  std::string name;
  int opset = 0;
  std::vector<int> inputs;   // value ids; -1 marks an omitted optional input
  std::vector<int> outputs;  // value ids; -1 marks an omitted optional output
  std::map<std::string, Attribute> attrs;
  /// Set by the mixed-precision pass on a float32-by-rule recurrent node of a
  /// half session (LSTM, GRU, RNN): its GEMMs may run on tensor cores with
  /// 10-bit-mantissa operands (TF32 in cuBLAS; FP16 for the GRU sequence
  /// kernel's h * R^T); state, gate math and accumulation stay float32.
  bool tf32_gemms = false;

  bool Has(const std::string& attr) const { return attrs.count(attr) != 0; }
  int64_t GetInt(const std::string& attr, int64_t fallback) const;
  float GetFloat(const std::string& attr, float fallback) const;
  std::string GetString(const std::string& attr, const std::string& fallback) const;
  std::vector<int64_t> GetInts(const std::string& attr, std::vector<int64_t> fallback = {}) const;
  std::vector<float> GetFloats(const std::string& attr, std::vector<float> fallback = {}) const;
  /// "OpType 'name'" for error messages.
  std::string Describe() const;
  int num_inputs() const { return static_cast<int>(inputs.size()); }
  bool HasInput(int i) const { return i < num_inputs() && inputs[i] >= 0; }
};

class Graph {
 public:
  std::vector<Value> values;
  std::vector<Node> nodes;     // topologically sorted after Verify()
  std::vector<int> inputs;     // value ids fed by the caller, in model order
  std::vector<int> outputs;    // value ids returned, in model order
  int opset = 0;               // default-domain opset of the model
  std::string name;
  std::map<std::string, std::string> metadata;  // the model's metadata_props

  int AddValue(Value v);
  /// Id of the value with this name, or -1.
  int Find(const std::string& name) const;
  int AddNode(Node n);
  /// Recomputes producers, sorts nodes topologically and checks the graph is
  /// well formed; throws kModel naming the node or value at fault.
  void Verify();
  /// Per value, the node indices that read it.
  std::vector<std::vector<int>> Consumers() const;
  /// Drops nodes whose outputs nobody needs and values nobody references.
  void RemoveDeadNodes();

 private:
  std::map<std::string, int> by_name_;
};

/// True when input `index` of `op_type` is a shape, axes, count or index-like
/// operand: its initializer is structural (never refit) and must be known at plan time.
bool IsShapeOperand(const std::string& op_type, int index);

}  // namespace kaiwu
