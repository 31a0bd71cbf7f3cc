#include "backends/kernel.h"

#include <algorithm>

namespace kaiwu {

const TensorInfo& PrepareContext::in(int i) const {
  if (!HasInput(i)) Error("input ", i, " is required but missing");
  return inputs[i];
}

void PrepareContext::SetOutput(int i, DType dtype, Shape shape) {
  if (static_cast<int>(outputs.size()) <= i) outputs.resize(i + 1);
  for (int64_t d : shape)
    if (d < 0) Error("computed a negative output dimension in ", ShapeToString(shape));
  outputs[i].present = true;
  outputs[i].dtype = dtype;
  outputs[i].shape = std::move(shape);
}

void PrepareContext::ExpectDType(int i, std::initializer_list<DType> allowed) const {
  DType t = in(i).dtype;
  for (DType a : allowed)
    if (a == t) return;
  std::string names;
  for (DType a : allowed) names += std::string(names.empty() ? "" : ", ") + DTypeName(a);
  Error("input ", i, " has dtype ", DTypeName(t), ", expected one of: ", names);
}

std::vector<int64_t> PrepareContext::ConstInts(int i) const {
  const TensorInfo& t = in(i);
  if (!t.data)
    Error("input ", i, " must be known when the plan is built (a constant or computed from "
          "shapes); data-dependent shapes are not supported");
  std::vector<int64_t> out(static_cast<size_t>(t.size()));
  for (size_t k = 0; k < out.size(); ++k) {
    switch (t.dtype) {
      case DType::kInt64: out[k] = t.As<int64_t>()[k]; break;
      case DType::kInt32: out[k] = t.As<int32_t>()[k]; break;
      default: Error("input ", i, " must be int64 or int32, got ", DTypeName(t.dtype));
    }
  }
  return out;
}

void KernelRegistry::Register(const std::string& op_type, KernelFactory factory,
                              const std::string& domain) {
  entries_.emplace_back(domain + ":" + op_type, factory);
}

KernelFactory KernelRegistry::Find(const std::string& op_type, const std::string& domain) const {
  std::string d = domain == "ai.onnx" ? "" : domain;
  std::string key = d + ":" + op_type;
  for (const auto& e : entries_)
    if (e.first == key) return e.second;
  return nullptr;
}

std::vector<std::string> KernelRegistry::OpTypes(const std::string& domain) const {
  std::vector<std::string> ops;
  std::string prefix = domain + ":";
  for (const auto& e : entries_)
    if (e.first.rfind(prefix, 0) == 0) ops.push_back(e.first.substr(prefix.size()));
  std::sort(ops.begin(), ops.end());
  return ops;
}

}  // namespace kaiwu
