// The rewrite rules. Each returns how many times it fired; the graph stays
// valid (Verify-able) after each call.
#pragma once

#include "ir/graph.h"

namespace kaiwu {

/// Identity and inference-mode Dropout: readers use the input directly.
int EliminateIdentity(Graph* g);
/// Conv followed by BatchNormalization becomes one Conv whose weight and bias
/// are computed from the originals by static nodes (recomputed on refit).
int FoldConvBatchNorm(Graph* g);
/// Div / Mul by a static scalar feeding only a Conv's input (uint8 frames / 255)
/// becomes a Conv over the undivided input with W / c computed by a static node.
int FoldScaleIntoConv(Graph* g);
/// Conv/Gemm/MatMul followed by an activation (Relu, LeakyRelu, Tanh, Sigmoid,
/// Clip with constant bounds, HardSigmoid, HardSwish): the kernel applies it.
int FuseActivation(Graph* g);
/// tf2onnx's SpaceToBatchND -> Conv -> BatchToSpaceND chain becomes one dilated Conv.
int FoldDilatedConv(Graph* g);
/// Transpose of a Transpose (possibly through a unary elementwise op): one Transpose or none.
int FoldTransposePair(Graph* g);
/// Split whose pieces all feed one Concat: identity, or Reshape+Transpose+Reshape.
int FoldSplitConcat(Graph* g);
/// ones_like/zeros_like/full_like arithmetic becomes ConstantOfShape(Shape(x)) (exact forms only).
int FoldConstantFill(Graph* g);
/// Same op over the same inputs with the same attributes: computed once.
int EliminateCommonSubexpr(Graph* g);
/// MatMul(X 2-D, W static) + static bias becomes Gemm.
int FuseMatMulAdd(Graph* g);
/// Transpose(X) keeping X's innermost dim -> MatMul(., W static 2-D) [-> Add(., static
/// bias of rank <= 1)] becomes MatMul(X, W) [-> Add] -> Transpose: the layer reads X in
/// place and the transpose can fold into its reader (attention views, another Transpose).
int SinkTransposeBelowMatMul(Graph* g);
/// An activation after a Reshape of a Conv/Gemm/MatMul moves before the Reshape.
int HoistActivationAboveReshape(Graph* g);
/// A 2-D Transpose of a static Gemm operand becomes transA/transB.
int FoldTransposeIntoGemm(Graph* g);
/// torch's exact GELU export (Div by sqrt(2), Erf, Add 1, Mul by x, Mul by 0.5) becomes one Gelu.
int FuseGelu(Graph* g);
/// Chains of float elementwise ops become one kaiwu FusedElementwise node.
int FuseElementwise(Graph* g);
/// CPU sessions only (Session::Load runs it after Optimize, not a kRules entry):
/// Gemm/MatMul against a static float32 matrix become kaiwu PackedGemm with the
/// matrix packed into column panels by static nodes (re-packed on refit); an
/// LSTM with static W and R reads their packed forms too.
int PrepackGemmWeights(Graph* g);
/// CPU sessions, after the float32 convs went channels-last: each kaiwu NhwcConv
/// with a static weight [M, KH, KW, C] gets it packed into the GEMM's column
/// panels as input 3 ([ceil(M / 16), KH * KW * C, 16], by static nodes).
int PrepackNhwcConvWeights(Graph* g);
/// Device sessions only (Session::Load runs it after Optimize, not a kRules entry):
/// Transpose([1, 0, 2]) -> LSTM/GRU (one direction) -> Squeeze(1) -> Transpose([1, 0, 2])
/// becomes the op in layout 1 (batch-first) squeezed at axis 2, its states through
/// Reshapes: two kernels fewer per run. KAIWU_RNN_BATCH_FIRST=0 keeps the transposes.
int FoldRnnBatchFirst(Graph* g);
/// Device sessions only (after FoldRnnBatchFirst): MatMul(A, Transpose(X, p)) with
/// p[r-2] == r-1 reads B transposed (_kaiwu_trans_b) behind a transpose that
/// keeps X's innermost dim (none when that is the identity): a copy of rows
/// instead of a tile transpose. KAIWU_MATMUL_TRANS_B=0 keeps the transposes.
int FoldTransposeIntoMatMul(Graph* g);
/// CPU sessions, after the layout pass: Transpose(Cast uint8/int8 -> float32) becomes
/// Cast(Transpose) where the Cast feeds only the Transpose (a quarter of the bytes moved).
int HoistTransposeAboveCast(Graph* g);
/// CPU sessions, after the layout pass: Add(r, NhwcConv(x)) becomes NhwcConv(x, sum = r) where
/// r provably has the conv output's shape (a residual block) and the conv has no activation.
int FuseNhwcConvAdd(Graph* g);
/// CPU sessions, after the layout pass: Relu(x) read only by a padded NhwcConv becomes the
/// conv's "_kaiwu_input_relu" (applied as the conv copies x into its zero-bordered buffer).
int FuseReluIntoNhwcConv(Graph* g);
/// CPU sessions, after the layout pass: Cast(x uint8 -> float32) read only by an NhwcConv
/// becomes the conv reading x (widened as it copies each image into its buffer).
int FuseCastIntoNhwcConv(Graph* g);
/// DQ(x), DQ(w) -> Conv/Gemm/MatMul (+bias, +activation) [-> Q] becomes one integer
/// QLinearFused node over weights packed by a static QPackWeights node.
int FuseQdq(Graph* g);
/// Reshape/Flatten of a per-tensor DequantizeLinear's output becomes the DQ of the
/// reshaped quantized tensor (DQ -> Flatten -> Q then becomes a table lookup).
int HoistReshapeAboveDequantize(Graph* g);
/// Q(f(x)) for 8-bit x and a chain f of elementwise ops with static scalar operands
/// (DQ -> Tanh -> Q; uint8 frames -> Cast -> Div -> Q) becomes a 256-entry table lookup
/// (kaiwu QLookup), the table computed by static nodes (recomputed on refit).
int FuseQdqLookup(Graph* g);
/// CPU sessions, after the int8 layout pass: MaxPool / NhwcMaxPool of a per-tensor
/// DequantizeLinear (positive static scale) read only by it pools the bytes first.
int HoistMaxPoolAboveDequantize(Graph* g);
/// CPU sessions, after the int8 layout pass: Q(Add(DQ(a), DQ(b))), all per tensor with
/// static scalars, becomes one kaiwu QLinearAdd over the bytes.
int FuseQdqAdd(Graph* g);

}  // namespace kaiwu
