// Shape inference of the pure views: Reshape, Flatten, Squeeze, Unsqueeze,
// Identity and inference-mode Dropout. Output 0 holds input 0's bytes under
// another shape, so each declares it an alias of input 0.
#include <utility>
#include <vector>

#include "ops/tensor.h"

namespace kaiwu {
namespace {

// Sets output 0 to `shape` with input 0's dtype, aliasing input 0.
void SetView(OpContext& ctx, Shape shape) {
  const TensorInfo& x = ctx.in(0);
  if (NumElements(shape) != x.size())
    ctx.Error("cannot view ", ShapeToString(x.shape), " as ", ShapeToString(shape));
  ctx.SetOutput(0, x.dtype, std::move(shape));
  if (ctx.alias.empty()) ctx.alias.assign(ctx.outputs.size(), -1);
  ctx.alias[0] = 0;
}

void InferReshape(OpContext& ctx) {
  const Shape& in = ctx.in(0).shape;
  if (!ctx.HasInput(1) && !ctx.node.Has("shape")) ctx.Error("the shape input is missing");
  std::vector<int64_t> target = ctx.HasInput(1) ? ctx.ConstInts(1) : ctx.node.GetInts("shape");
  bool allow_zero = ctx.node.GetInt("allowzero", 0) != 0;
  Shape out(target.size());
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t v = target[i];
    if (v == -1) {
      if (infer >= 0) ctx.Error("shape ", ShapeToString(target), " has more than one -1");
      infer = static_cast<int>(i);
      continue;
    }
    if (v == 0 && !allow_zero) {
      if (i >= in.size())
        ctx.Error("shape ", ShapeToString(target), " copies dim ", i, " (0) but the input ",
                  ShapeToString(in), " has rank ", in.size());
      v = in[i];
    } else if (v < 0) {
      ctx.Error("shape ", ShapeToString(target), " has invalid dim ", v);
    }
    out[i] = v;
    known *= v;
  }
  int64_t total = NumElements(in);
  if (infer >= 0) {
    if (known == 0 || total % known != 0)
      ctx.Error("cannot infer the -1 dim reshaping ", ShapeToString(in), " to ",
                ShapeToString(target));
    out[infer] = total / known;
  }
  SetView(ctx, std::move(out));
}

void InferFlatten(OpContext& ctx) {
  const Shape& in = ctx.in(0).shape;
  int64_t rank = static_cast<int64_t>(in.size());
  int64_t axis = ctx.node.GetInt("axis", 1);
  if (axis < -rank || axis > rank)
    ctx.Error("axis ", axis, " is out of range [", -rank, ", ", rank, "]");
  if (axis < 0) axis += rank;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d) (d < axis ? outer : inner) *= in[d];
  SetView(ctx, {outer, inner});
}

// Axes from input 1 (opset 13+) or the `axes` attribute (older opsets).
bool ReadAxes(const OpContext& ctx, std::vector<int64_t>* axes) {
  if (ctx.node.opset >= 13) {
    if (!ctx.HasInput(1)) return false;
    *axes = ctx.ConstInts(1);
    return true;
  }
  if (!ctx.node.Has("axes")) return false;
  *axes = ctx.node.GetInts("axes");
  return true;
}

void InferSqueeze(OpContext& ctx) {
  const Shape& in = ctx.in(0).shape;
  int64_t rank = static_cast<int64_t>(in.size());
  std::vector<bool> drop(in.size(), false);
  std::vector<int64_t> axes;
  if (ReadAxes(ctx, &axes) && !axes.empty()) {
    for (int64_t a : axes) {
      int64_t d = NormalizeAxis(ctx, a, rank);
      if (drop[d]) ctx.Error("axis ", a, " is repeated");
      if (in[d] != 1)
        ctx.Error("cannot squeeze axis ", a, " of size ", in[d], " in ", ShapeToString(in));
      drop[d] = true;
    }
  } else {
    for (int64_t d = 0; d < rank; ++d) drop[d] = in[d] == 1;
  }
  Shape out;
  for (int64_t d = 0; d < rank; ++d)
    if (!drop[d]) out.push_back(in[d]);
  SetView(ctx, std::move(out));
}

void InferUnsqueeze(OpContext& ctx) {
  const Shape& in = ctx.in(0).shape;
  std::vector<int64_t> axes;
  if (!ReadAxes(ctx, &axes)) ctx.Error("axes are required");
  int64_t out_rank = static_cast<int64_t>(in.size() + axes.size());
  std::vector<bool> inserted(out_rank, false);
  for (int64_t a : axes) {
    int64_t d = NormalizeAxis(ctx, a, out_rank);
    if (inserted[d]) ctx.Error("axis ", a, " is repeated");
    inserted[d] = true;
  }
  Shape out(out_rank);
  size_t next = 0;
  for (int64_t d = 0; d < out_rank; ++d) out[d] = inserted[d] ? 1 : in[next++];
  SetView(ctx, std::move(out));
}

void InferIdentity(OpContext& ctx) { SetView(ctx, ctx.in(0).shape); }

// Inference-mode Dropout: output 0 is the input, the optional mask (output 1)
// is all true. A training_mode input known at plan time must be false; the
// kernels check one computed at run time.
void InferDropout(OpContext& ctx) {
  ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16});
  if (ctx.HasInput(2)) {
    const TensorInfo& t = ctx.in(2);
    if (t.dtype != DType::kBool || t.size() != 1) ctx.Error("training_mode must be a bool scalar");
    if (t.data && *t.As<bool>()) ctx.Error("training-mode dropout is not supported");
  }
  SetView(ctx, ctx.in(0).shape);
  if (ctx.node.outputs.size() > 1) ctx.SetOutput(1, DType::kBool, ctx.in(0).shape);
}

}  // namespace

void RegisterTensorViewOps(OpRegistry& r) {
  r.Define(OpId::kReshape, &InferReshape);
  r.Define(OpId::kFlatten, &InferFlatten);
  r.Define(OpId::kSqueeze, &InferSqueeze);
  r.Define(OpId::kUnsqueeze, &InferUnsqueeze);
  r.Define(OpId::kIdentity, &InferIdentity);
  r.Define(OpId::kDropout, &InferDropout);
}

}  // namespace kaiwu
