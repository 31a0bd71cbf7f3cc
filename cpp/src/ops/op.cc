#include "ops/op.h"

#include <string>
#include <unordered_map>

#include "ops/op_registry.h"

namespace kaiwu {
namespace {

struct OpNames {
  const char* name;
  const char* domain;
};

constexpr OpNames kOpNames[] = {
#define KAIWU_OP(name, domain) {#name, domain},
#include "ops/op_list.inc"
#undef KAIWU_OP
};
static_assert(sizeof(kOpNames) / sizeof(kOpNames[0]) == kNumOps,
              "op_list.inc and OpId disagree");

}  // namespace

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFloat32: return "fp32";
    case Precision::kFloat16: return "fp16";
    case Precision::kBFloat16: return "bf16";
    case Precision::kInt8: return "int8";
  }
  return "?";
}

const char* OpName(OpId op) { return op < OpId::kCount ? kOpNames[static_cast<int>(op)].name : "?"; }
const char* OpDomain(OpId op) { return op < OpId::kCount ? kOpNames[static_cast<int>(op)].domain : ""; }

OpId FindOp(const std::string& op_type, const std::string& domain) {
  static const std::unordered_map<std::string, OpId> by_key = [] {
    std::unordered_map<std::string, OpId> m;
    for (int i = 0; i < kNumOps; ++i)
      m.emplace(std::string(kOpNames[i].domain) + ":" + kOpNames[i].name, static_cast<OpId>(i));
    return m;
  }();
  const std::string d = domain == "ai.onnx" ? "" : domain;
  auto it = by_key.find(d + ":" + op_type);
  return it == by_key.end() ? OpId::kCount : it->second;
}

OpId NodeOp(const Node& node) { return FindOp(node.op_type, node.domain); }

void OpRegistry::Define(OpId op, InferFn infer, int type_input, EvalFn eval) {
  OpDef& d = defs[static_cast<int>(op)];
  d.infer = infer;
  d.type_input = type_input;
  d.eval = eval;
}

const OpDef& GetOpDef(OpId op) {
  static const OpRegistry registry = [] {
    OpRegistry r;
    RegisterAllOps(r);
    return r;
  }();
  if (op >= OpId::kCount) Fail(StatusCode::kInternal, "no definition for an unknown op");
  return registry.defs[static_cast<int>(op)];
}

void InferOp(OpContext& ctx) {
  const OpId op = NodeOp(ctx.node);
  if (op == OpId::kCount)
    Fail(StatusCode::kUnsupported, ctx.node.Describe(), ": no such op in the engine");
  const OpDef& def = GetOpDef(op);
  if (!def.infer) Fail(StatusCode::kInternal, ctx.node.Describe(), ": op has no shape inference");
  ctx.outputs.assign(ctx.node.outputs.size(), TensorInfo{});
  ctx.alias.assign(ctx.node.outputs.size(), -1);
  ctx.alias_offset.clear();
  ctx.unused_inputs.clear();
  ctx.shape_only = false;
  ctx.params.reset();
  def.infer(ctx);
  for (size_t o = 0; o < ctx.node.outputs.size(); ++o)
    if (ctx.node.outputs[o] >= 0 && (o >= ctx.outputs.size() || !ctx.outputs[o].present))
      Fail(StatusCode::kModel, ctx.node.Describe(), ": output ", o, " is not produced by ",
           ctx.node.op_type, " (the node lists ", ctx.node.outputs.size(), " outputs)");
}

DType KernelKeyDType(const OpContext& ctx) {
  const OpDef& def = GetOpDef(NodeOp(ctx.node));
  if (def.type_input >= 0 && ctx.HasInput(def.type_input)) return ctx.inputs[def.type_input].dtype;
  return ctx.outputs.empty() ? DType::kUndefined : ctx.outputs[0].dtype;
}

}  // namespace kaiwu
