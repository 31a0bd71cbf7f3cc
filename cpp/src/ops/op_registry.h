// The op families' definition functions, called once by GetOpDef (op.cc).
// Each family file (ops/<family>.cc) defines its ops' shape inference with
// OpRegistry::Define; a family's params structs live in ops/<family>.h.
#pragma once

#include "ops/op.h"

namespace kaiwu {

void RegisterAllOps(OpRegistry& r);  // op_registry.cc: calls the families below

void RegisterShapeOps(OpRegistry& r);  // shape_ops.cc: Shape Size ConstantOfShape Range
void RegisterBinaryOps(OpRegistry& r);  // binary.cc: Add Sub Mul Div Mod Min Max Sum Mean Pow PRelu, comparisons and logic, Where, Cast, CastLike, FusedElementwise
void RegisterUnaryOps(OpRegistry& r);  // unary.cc: unary math and activations
void RegisterSoftmaxOps(OpRegistry& r);  // softmax.cc: Softmax LogSoftmax Hardmax
void RegisterLinalgOps(OpRegistry& r);  // linalg.cc: Gemm MatMul Einsum
void RegisterConvOps(OpRegistry& r);  // conv.cc: Conv and the pools
void RegisterNormOps(OpRegistry& r);  // norm.cc: BatchNormalization InstanceNormalization LayerNormalization
void RegisterReduceOps(OpRegistry& r);  // reduce.cc: Reduce*, ArgMax, ArgMin
void RegisterRnnOps(OpRegistry& r);  // rnn.cc: LSTM GRU
void RegisterTensorOps(OpRegistry& r);  // tensor.cc: layout and indexing: Concat Split Expand Tile Gather* OneHot Pad Slice Transpose Reshape ...
void RegisterGameOps(OpRegistry& r);  // game.cc: Resize ScatterElements ScatterND TopK CumSum
void RegisterQuantOps(OpRegistry& r);  // quant.cc, quant_fused.cc: Q/DQ, integer ops, fused integer nodes

}  // namespace kaiwu
