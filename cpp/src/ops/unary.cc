// Shape inference of the unary math ops (Neg Abs Sign Sqrt Exp Log Reciprocal
// Floor Ceil Round Sin Cos Erf Sigmoid Tanh Softplus Softsign), IsNaN IsInf,
// the activations (Relu LeakyRelu Elu Selu Celu HardSigmoid HardSwish Gelu
// ThresholdedRelu Mish) and Clip. All keep the input's shape.
#include "ops/unary.h"

#include <limits>
#include <string>

#include "ops/op_registry.h"

namespace kaiwu {
namespace {

void SameAsInput(OpContext& ctx, std::initializer_list<DType> dtypes) {
  ctx.ExpectInputs(1, 1);
  ctx.ExpectDType(0, dtypes);
  ctx.SetOutput(0, ctx.in(0).dtype, ctx.in(0).shape);
}

// Neg wraps on signed integers; unsigned ones have no negation.
void InferNeg(OpContext& ctx) {
  SameAsInput(ctx, {DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kInt16,
                    DType::kInt32, DType::kInt64, DType::kFloat16, DType::kBFloat16});
}

void InferNumeric(OpContext& ctx) {  // Abs Sign
  SameAsInput(ctx, {DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kUInt8,
                    DType::kInt16, DType::kInt32, DType::kInt64, DType::kFloat16,
                    DType::kBFloat16});
}

void InferFloat(OpContext& ctx) {  // the transcendental and rounding ops, HardSwish, Mish
  SameAsInput(ctx, {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16});
}

void InferRelu(OpContext& ctx) {
  SameAsInput(ctx, {DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kInt16,
                    DType::kInt32, DType::kInt64, DType::kFloat16, DType::kBFloat16});
}

void InferIsSpecial(OpContext& ctx) {  // IsNaN IsInf
  ctx.ExpectInputs(1, 1);
  ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16});
  if (NodeOp(ctx.node) == OpId::kIsInf) {
    IsInfParams& p = ctx.SetParams<IsInfParams>();
    p.detect_positive = ctx.node.GetInt("detect_positive", 1) != 0;
    p.detect_negative = ctx.node.GetInt("detect_negative", 1) != 0;
  }
  ctx.SetOutput(0, DType::kBool, ctx.in(0).shape);
}

// The activations with attributes.
void InferActivation(OpContext& ctx) {
  InferFloat(ctx);
  const Node& node = ctx.node;
  ActivationParams& p = ctx.SetParams<ActivationParams>();
  switch (NodeOp(node)) {
    case OpId::kLeakyRelu: p.alpha = node.GetFloat("alpha", 0.01f); break;
    case OpId::kElu: p.alpha = node.GetFloat("alpha", 1.f); break;
    case OpId::kSelu:
      p.alpha = node.GetFloat("alpha", 1.67326319217681884765625f);
      p.gamma = node.GetFloat("gamma", 1.05070102214813232421875f);
      break;
    case OpId::kCelu:
      p.alpha = node.GetFloat("alpha", 1.f);
      if (p.alpha == 0) ctx.Error("alpha must be non-zero");
      break;
    case OpId::kHardSigmoid:
      p.alpha = node.GetFloat("alpha", 0.2f);
      p.beta = node.GetFloat("beta", 0.5f);
      break;
    case OpId::kThresholdedRelu: p.alpha = node.GetFloat("alpha", 1.f); break;
    case OpId::kGelu: {
      std::string approx = node.GetString("approximate", "none");
      if (approx != "none" && approx != "tanh")
        ctx.Error("approximate must be \"none\" or \"tanh\", got \"", approx, "\"");
      p.gelu_tanh = approx == "tanh";
      break;
    }
    default: break;
  }
}

// Clip: opset >= 11 takes min and max as optional one-element inputs; older
// opsets carry them as float attributes.
void InferClip(OpContext& ctx) {
  ctx.ExpectInputs(1, 3);
  ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kUInt8,
                      DType::kInt16, DType::kInt32, DType::kInt64, DType::kFloat16,
                      DType::kBFloat16});
  const DType dtype = ctx.in(0).dtype;
  ClipParams& p = ctx.SetParams<ClipParams>();
  for (int i = 1; i < 3; ++i) {
    p.has_bound[i - 1] = ctx.HasInput(i);
    if (!ctx.HasInput(i)) continue;
    if (ctx.in(i).dtype != dtype) ctx.Error("bound ", i, " dtype differs from input's");
    if (ctx.in(i).size() != 1) ctx.Error("bound ", i, " must hold one element");
  }
  p.attr_bounds = ctx.node.opset > 0 && ctx.node.opset < 11;
  if (p.attr_bounds) {
    if (!IsFloat(dtype)) ctx.Error("opset < 11 Clip takes floating-point inputs only");
    p.attr_min = ctx.node.GetFloat("min", -std::numeric_limits<float>::max());
    p.attr_max = ctx.node.GetFloat("max", std::numeric_limits<float>::max());
  }
  ctx.SetOutput(0, dtype, ctx.in(0).shape);
}

}  // namespace

void RegisterUnaryOps(OpRegistry& r) {
  r.Define(OpId::kNeg, &InferNeg);
  for (OpId op : {OpId::kAbs, OpId::kSign}) r.Define(op, &InferNumeric);
  for (OpId op : {OpId::kSqrt, OpId::kExp, OpId::kLog, OpId::kReciprocal, OpId::kFloor,
                  OpId::kCeil, OpId::kRound, OpId::kSin, OpId::kCos, OpId::kErf, OpId::kSigmoid,
                  OpId::kTanh, OpId::kSoftplus, OpId::kSoftsign, OpId::kHardSwish, OpId::kMish})
    r.Define(op, &InferFloat);
  for (OpId op : {OpId::kIsNaN, OpId::kIsInf}) r.Define(op, &InferIsSpecial);
  r.Define(OpId::kRelu, &InferRelu);
  for (OpId op : {OpId::kLeakyRelu, OpId::kElu, OpId::kSelu, OpId::kCelu, OpId::kHardSigmoid,
                  OpId::kThresholdedRelu, OpId::kGelu})
    r.Define(op, &InferActivation);
  r.Define(OpId::kClip, &InferClip);
}

}  // namespace kaiwu
