// What the kernels of the binary elementwise family read from the op layer:
// Mod's remainder kind, Cast's element type codes, and the FusedElementwise
// chain (its ops, shared by the fusion pass, the CPU and the CUDA kernels).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/host_device.h"
#include "ops/op_context.h"

namespace kaiwu {

/// Mod: fmod = 1 is C's remainder (the dividend's sign, floats allowed);
/// fmod = 0 Python's modulus (the divisor's sign), integers only.
struct ModParams : OpParams {
  bool fmod = false;
};

/// ONNX TensorProto element type code -> engine dtype, or kUndefined when the
/// engine does not support it (Cast's `to`).
DType DTypeFromOnnxCode(int64_t code);

// FusedElementwise (domain "kaiwu"): a chain of float32 elementwise ops applied
// in one pass over memory. Made by the fuse_elementwise rewrite rule.
//
// Inputs: 0 is the chain's data x; 1.. are the binary ops' other operands
// (weights or constants, read at run time so refit reaches them).
// Attributes:
//   ops      (strings) op types in order: Add Sub Mul Div Relu Sigmoid Tanh Exp
//            Neg Abs Sqrt Clip LeakyRelu
//   operand  (ints)    per op, the input index of its operand, or 0 for unary ops
//   swapped  (ints)    per op, 1 when the operand is the left one (c - y, c / y)
//   params   (floats)  per op two numbers: Clip bounds, LeakyRelu alpha
// The output has the numpy broadcast shape of x and all operands; since every
// op is elementwise, applying the chain in the output shape is exact.

/// One op of a FusedElementwise chain.
enum class FusedOp : int {
  kAdd, kSub, kMul, kDiv, kRelu, kSigmoid, kTanh, kExp, kNeg, kAbs, kSqrt, kClip, kLeakyRelu,
};

/// True for the chain ops that take an operand (Add Sub Mul Div).
KAIWU_HOST_DEVICE inline bool IsBinaryFusedOp(FusedOp op) {
  return op == FusedOp::kAdd || op == FusedOp::kSub || op == FusedOp::kMul || op == FusedOp::kDiv;
}

/// True for the op types FusedElementwise can apply (with the ONNX semantics
/// of float32 inputs).
bool FusedElementwiseSupports(const std::string& op_type);

/// The checked chain of a FusedElementwise node.
struct FusedElementwiseParams : OpParams {
  struct Step {
    FusedOp op = FusedOp::kAdd;
    int operand = 0;       // binary ops: the input index of the operand (>= 1)
    bool swapped = false;  // the operand is the left one
    float p0 = 0, p1 = 0;  // Clip bounds; LeakyRelu alpha
  };
  std::vector<Step> steps;
};

}  // namespace kaiwu
