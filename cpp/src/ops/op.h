// The op layer: what an op means, independent of any backend.
//
// Every op the engine knows is one line of ops/op_list.inc, which generates
// OpId and the names. Per op, an OpDef holds its shape inference: attribute
// parsing and validation, dtype rules and output shapes, done once per node
// and input-shape signature by the planner (InferOp). Its results (output
// dtypes and shapes, in-place aliases, the checked attributes as an OpParams
// object) are what backend kernels receive; kernels only compute.
//
// Ops whose outputs depend only on input shapes or on values known when the
// plan is built (Shape, Size, ConstantOfShape, Range) also have an EvalFn: the
// planner evaluates them on the host at plan time, and no backend needs a
// kernel for them.
#pragma once

#include <cstdint>
#include <string>

#include "ops/op_context.h"

namespace kaiwu {

enum class OpId : uint16_t {
#define KAIWU_OP(name, domain) k##name,
#include "ops/op_list.inc"
#undef KAIWU_OP
  kCount,  ///< also "no such op"
};
constexpr int kNumOps = static_cast<int>(OpId::kCount);

/// Precision a kernel computes in. kFloat32 is the model's own precision
/// (kernels of integer or bool ops register under it too).
enum class Precision : uint8_t { kFloat32, kFloat16, kBFloat16, kInt8 };
const char* PrecisionName(Precision p);

const char* OpName(OpId op);
/// "" for the default ONNX domain.
const char* OpDomain(OpId op);
/// The op for an ONNX op type and domain ("" or "ai.onnx" for the default
/// domain), or OpId::kCount when the engine does not know it.
OpId FindOp(const std::string& op_type, const std::string& domain);
/// The op of a node (FindOp on its op type and domain).
OpId NodeOp(const Node& node);

/// Sets ctx.outputs (and optionally ctx.alias, ctx.shape_only, ctx.params), or
/// throws kModel naming the node.
using InferFn = void (*)(OpContext& ctx);
/// Writes the outputs on the host from what shape inference computed (the
/// params and output infos it set).
using EvalFn = void (*)(const OpParams& params, const std::vector<TensorInfo>& outputs,
                        void* const* data);

struct OpDef {
  InferFn infer = nullptr;
  /// Plan-time evaluation; set for ops that never run as a step.
  EvalFn eval = nullptr;
  /// Input whose dtype selects the kernel in a backend's table; -1: output 0's.
  int type_input = 0;
};

/// The definition of every op, filled once by the Register*Ops functions
/// (ops/op_registry.cc).
const OpDef& GetOpDef(OpId op);

/// Op shape inference for ctx.node: the op's InferFn. Throws kModel naming the
/// node for anything the op does not accept.
void InferOp(OpContext& ctx);

/// The dtype a backend keys its kernel table on for this node (after InferOp).
DType KernelKeyDType(const OpContext& ctx);

/// Registration of op definitions, one function per family (explicit, like the
/// kernels: no static initialisers).
class OpRegistry {
 public:
  void Define(OpId op, InferFn infer, int type_input = 0, EvalFn eval = nullptr);
  OpDef defs[kNumOps];
};

}  // namespace kaiwu
