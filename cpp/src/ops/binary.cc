// Shape inference of the binary elementwise family: Add Sub Mul Div Mod Min
// Max Sum Mean Pow PRelu, comparisons and logic (Equal Less Greater
// LessOrEqual GreaterOrEqual And Or Xor Not), Where, Cast, CastLike and
// FusedElementwise. Dtype rules, attributes and broadcasting are checked here
// once for every backend; the kernels only plan and compute.
#include "ops/binary.h"

#include <utility>

#include "ops/op_registry.h"

namespace kaiwu {

DType DTypeFromOnnxCode(int64_t code) {
  switch (code) {
    case 1: return DType::kFloat32;
    case 2: return DType::kUInt8;
    case 3: return DType::kInt8;
    case 5: return DType::kInt16;
    case 6: return DType::kInt32;
    case 7: return DType::kInt64;
    case 9: return DType::kBool;
    case 10: return DType::kFloat16;
    case 11: return DType::kFloat64;
    case 16: return DType::kBFloat16;
    default: return DType::kUndefined;
  }
}

namespace {

const std::pair<const char*, FusedOp> kFusedOps[] = {
    {"Add", FusedOp::kAdd},   {"Sub", FusedOp::kSub},         {"Mul", FusedOp::kMul},
    {"Div", FusedOp::kDiv},   {"Relu", FusedOp::kRelu},       {"Sigmoid", FusedOp::kSigmoid},
    {"Tanh", FusedOp::kTanh}, {"Exp", FusedOp::kExp},         {"Neg", FusedOp::kNeg},
    {"Abs", FusedOp::kAbs},   {"Sqrt", FusedOp::kSqrt},       {"Clip", FusedOp::kClip},
    {"LeakyRelu", FusedOp::kLeakyRelu},
};

bool LookupFusedOp(const std::string& name, FusedOp* op) {
  for (const auto& [n, o] : kFusedOps)
    if (name == n) {
      *op = o;
      return true;
    }
  return false;
}

// Add Sub Mul Div Mod (two inputs), Min Max Sum Mean (one or more): inputs of
// one dtype under numpy broadcasting; Sum and Mean on floats only. Mod also
// checks `fmod` against the dtype.
template <bool kVariadic, bool kFloatOnly, bool kMod = false>
void InferArith(OpContext& ctx) {
  const int n = ctx.num_inputs();
  if (kVariadic ? n < 1 : n != 2) ctx.Error("expected ", kVariadic ? "at least 1" : "2",
                                            " inputs, got ", n);
  const DType dtype = ctx.in(0).dtype;
  if (kFloatOnly) {
    ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16});
  } else {
    ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kUInt8,
                        DType::kInt16, DType::kInt32, DType::kInt64, DType::kFloat16,
                        DType::kBFloat16});
  }
  std::vector<Shape> shapes;
  for (int i = 0; i < n; ++i) {
    if (ctx.in(i).dtype != dtype)
      ctx.Error("input ", i, " has dtype ", DTypeName(ctx.in(i).dtype), ", input 0 has ",
                DTypeName(dtype));
    shapes.push_back(ctx.in(i).shape);
  }
  if (kMod) {
    int64_t fmod = ctx.node.GetInt("fmod", 0);
    if (fmod != 0 && fmod != 1) ctx.Error("fmod must be 0 or 1, got ", fmod);
    if (fmod == 0 && IsFloat(dtype)) ctx.Error("fmod must be 1 for floating-point inputs");
    ctx.SetParams<ModParams>().fmod = fmod != 0;
  }
  ctx.SetOutput(0, dtype, BroadcastAll(ctx, shapes));
}

// Pow: the output takes the base's dtype; the exponent may be of another.
void InferPow(OpContext& ctx) {
  if (ctx.num_inputs() != 2) ctx.Error("expected 2 inputs, got ", ctx.num_inputs());
  ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64,
                      DType::kFloat16, DType::kBFloat16});
  ctx.ExpectDType(1, {DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kUInt8,
                      DType::kInt16, DType::kInt32, DType::kInt64, DType::kFloat16,
                      DType::kBFloat16});
  ctx.SetOutput(0, ctx.in(0).dtype, BroadcastShapes(ctx, ctx.in(0).shape, ctx.in(1).shape));
}

// Requires `s` to broadcast to `out` without growing it.
void ExpectBroadcastsTo(const OpContext& ctx, const Shape& s, const Shape& out) {
  const size_t rank = out.size();
  bool ok = s.size() <= rank;
  for (size_t i = 0; ok && i < s.size(); ++i) ok = s[i] == out[rank - s.size() + i] || s[i] == 1;
  if (!ok)
    ctx.Error("input shape ", ShapeToString(s), " does not broadcast to ", ShapeToString(out));
}

// PRelu: y = x < 0 ? slope * x : x, the slope broadcasting to x's shape.
void InferPRelu(OpContext& ctx) {
  if (ctx.num_inputs() != 2) ctx.Error("expected 2 inputs, got ", ctx.num_inputs());
  ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64,
                      DType::kFloat16, DType::kBFloat16});
  const DType dtype = ctx.in(0).dtype;
  if (ctx.in(1).dtype != dtype) ctx.Error("slope dtype differs from X's");
  ExpectBroadcastsTo(ctx, ctx.in(1).shape, ctx.in(0).shape);
  ctx.SetOutput(0, dtype, ctx.in(0).shape);
}

enum class CompareKind { kEqual, kOrder, kLogical };

// Equal (numbers and bool), Less Greater LessOrEqual GreaterOrEqual (numbers),
// And Or Xor (bool): two inputs of one dtype, a broadcast bool output.
template <CompareKind kKind>
void InferCompare(OpContext& ctx) {
  if (ctx.num_inputs() != 2) ctx.Error("expected 2 inputs, got ", ctx.num_inputs());
  if (kKind == CompareKind::kLogical) {
    ctx.ExpectDType(0, {DType::kBool});
  } else if (kKind == CompareKind::kEqual) {
    ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kUInt8,
                        DType::kInt16, DType::kInt32, DType::kInt64, DType::kBool,
                        DType::kFloat16, DType::kBFloat16});
  } else {
    ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kUInt8,
                        DType::kInt16, DType::kInt32, DType::kInt64, DType::kFloat16,
                        DType::kBFloat16});
  }
  const DType dtype = ctx.in(0).dtype;
  if (ctx.in(1).dtype != dtype)
    ctx.Error("input dtypes differ: ", DTypeName(dtype), " and ", DTypeName(ctx.in(1).dtype));
  ctx.SetOutput(0, DType::kBool, BroadcastShapes(ctx, ctx.in(0).shape, ctx.in(1).shape));
}

void InferNot(OpContext& ctx) {
  if (ctx.num_inputs() != 1) ctx.Error("expected 1 input, got ", ctx.num_inputs());
  ctx.ExpectDType(0, {DType::kBool});
  ctx.SetOutput(0, DType::kBool, ctx.in(0).shape);
}

// Where(condition, X, Y): X and Y of any one dtype, three-way broadcasting.
void InferWhere(OpContext& ctx) {
  if (ctx.num_inputs() != 3) ctx.Error("expected 3 inputs, got ", ctx.num_inputs());
  ctx.ExpectDType(0, {DType::kBool});
  const DType dtype = ctx.in(1).dtype;
  if (ctx.in(2).dtype != dtype)
    ctx.Error("X and Y dtypes differ: ", DTypeName(dtype), " and ", DTypeName(ctx.in(2).dtype));
  ctx.SetOutput(0, dtype, BroadcastAll(ctx, {ctx.in(0).shape, ctx.in(1).shape, ctx.in(2).shape}));
}

// Cast (target from the `to` attribute, an ONNX TensorProto code) and CastLike
// (target dtype of input 1) between float16/32/64, bfloat16, int8/16/32/64,
// uint8 and bool.
template <bool kLike>
void InferCast(OpContext& ctx) {
  if (ctx.num_inputs() != (kLike ? 2 : 1))
    ctx.Error("expected ", kLike ? 2 : 1, " inputs, got ", ctx.num_inputs());
  const std::initializer_list<DType> supported = {
      DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt8,
      DType::kUInt8,   DType::kInt16,   DType::kInt32,   DType::kInt64,    DType::kBool};
  ctx.ExpectDType(0, supported);
  DType to = DType::kUndefined;
  if (kLike) {
    ctx.ExpectDType(1, supported);
    to = ctx.in(1).dtype;
  } else {
    if (!ctx.node.Has("to")) ctx.Error("missing the 'to' attribute");
    int64_t code = ctx.node.GetInt("to", 0);
    to = DTypeFromOnnxCode(code);
    if (to == DType::kUndefined) ctx.Error("unsupported target element type ", code);
  }
  ctx.SetOutput(0, to, ctx.in(0).shape);
}

// FusedElementwise: see ops/binary.h.
void InferFusedElementwise(OpContext& ctx) {
  const Node& node = ctx.node;
  std::vector<std::string> ops = node.attrs.count("ops") ? node.attrs.at("ops").strings
                                                         : std::vector<std::string>{};
  std::vector<int64_t> operand = node.GetInts("operand"), swapped = node.GetInts("swapped");
  std::vector<float> params = node.GetFloats("params");
  if (ops.empty() || operand.size() != ops.size() || swapped.size() != ops.size() ||
      params.size() != 2 * ops.size())
    ctx.Error("attributes ops/operand/swapped/params disagree in length");
  // float32, or float16/bfloat16 throughout (the chain runs in float).
  const DType dtype = ctx.in(0).dtype;
  ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  for (int i = 1; i < ctx.num_inputs(); ++i) ctx.ExpectDType(i, {dtype});
  std::vector<Shape> shapes;
  for (int i = 0; i < ctx.num_inputs(); ++i) shapes.push_back(ctx.in(i).shape);
  Shape out = BroadcastAll(ctx, shapes);
  FusedElementwiseParams& p = ctx.SetParams<FusedElementwiseParams>();
  for (size_t k = 0; k < ops.size(); ++k) {
    FusedElementwiseParams::Step s;
    if (!LookupFusedOp(ops[k], &s.op)) ctx.Error("unsupported op '", ops[k], "' in the chain");
    s.operand = static_cast<int>(operand[k]);
    s.swapped = swapped[k] != 0;
    s.p0 = params[2 * k];
    s.p1 = params[2 * k + 1];
    if (IsBinaryFusedOp(s.op) && (s.operand < 1 || s.operand >= ctx.num_inputs()))
      ctx.Error("op ", k, " (", ops[k], ") names input ", s.operand, ", which does not exist");
    p.steps.push_back(s);
  }
  ctx.SetOutput(0, dtype, std::move(out));
}

}  // namespace

bool FusedElementwiseSupports(const std::string& op_type) {
  FusedOp op;
  return LookupFusedOp(op_type, &op);
}

void RegisterBinaryOps(OpRegistry& r) {
  r.Define(OpId::kAdd, &InferArith<false, false>);
  r.Define(OpId::kSub, &InferArith<false, false>);
  r.Define(OpId::kMul, &InferArith<false, false>);
  r.Define(OpId::kDiv, &InferArith<false, false>);
  r.Define(OpId::kMod, &InferArith<false, false, true>);
  r.Define(OpId::kMin, &InferArith<true, false>);
  r.Define(OpId::kMax, &InferArith<true, false>);
  r.Define(OpId::kSum, &InferArith<true, true>);
  r.Define(OpId::kMean, &InferArith<true, true>);
  r.Define(OpId::kPow, &InferPow);
  r.Define(OpId::kPRelu, &InferPRelu);
  r.Define(OpId::kEqual, &InferCompare<CompareKind::kEqual>);
  r.Define(OpId::kLess, &InferCompare<CompareKind::kOrder>);
  r.Define(OpId::kGreater, &InferCompare<CompareKind::kOrder>);
  r.Define(OpId::kLessOrEqual, &InferCompare<CompareKind::kOrder>);
  r.Define(OpId::kGreaterOrEqual, &InferCompare<CompareKind::kOrder>);
  r.Define(OpId::kAnd, &InferCompare<CompareKind::kLogical>);
  r.Define(OpId::kOr, &InferCompare<CompareKind::kLogical>);
  r.Define(OpId::kXor, &InferCompare<CompareKind::kLogical>);
  r.Define(OpId::kNot, &InferNot);
  r.Define(OpId::kWhere, &InferWhere, /*type_input=*/1);
  r.Define(OpId::kCast, &InferCast<false>);
  r.Define(OpId::kCastLike, &InferCast<true>);
  r.Define(OpId::kFusedElementwise, &InferFusedElementwise);
}

}  // namespace kaiwu
