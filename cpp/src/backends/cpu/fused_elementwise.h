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
#pragma once

#include <string>

namespace kaiwu {
namespace cpu {

/// True for the op types FusedElementwise can apply (with the ONNX semantics
/// of float32 inputs).
bool FusedElementwiseSupports(const std::string& op_type);

}  // namespace cpu
}  // namespace kaiwu
