// Shape inference of Resize ScatterElements ScatterND TopK CumSum (Resize's
// taps: ops/resize.cc).
#include "ops/game.h"

#include <string>

#include "ops/op_registry.h"
#include "ops/resize.h"

namespace kaiwu {

Reduction ParseReduction(const OpContext& ctx) {
  const std::string r = ctx.node.GetString("reduction", "none");
  if (r == "none") return Reduction::kNone;
  if (r == "add") return Reduction::kAdd;
  if (r == "mul") return Reduction::kMul;
  if (r == "max") return Reduction::kMax;
  if (r == "min") return Reduction::kMin;
  ctx.Error("unknown reduction '", r, "'");
}

const char* ReductionName(Reduction r) {
  switch (r) {
    case Reduction::kNone: return "none";
    case Reduction::kAdd: return "add";
    case Reduction::kMul: return "mul";
    case Reduction::kMax: return "max";
    case Reduction::kMin: return "min";
  }
  return "none";
}

namespace {

// ScatterElements(data, indices, updates; axis, reduction) -> data's dtype and shape.
void InferScatterElements(OpContext& ctx) {
  ctx.ExpectDType(1, {DType::kInt64, DType::kInt32});
  const TensorInfo& x = ctx.in(0);
  const TensorInfo& ind = ctx.in(1);
  const TensorInfo& upd = ctx.in(2);
  const int r = x.rank();
  constexpr int kMaxRank = kMaxScatterElementsRank;
  if (r < 1 || r > kMaxRank || ind.rank() != r)
    ctx.Error("data and indices must have the same rank in [1, ", kMaxRank, "], got ",
              ShapeToString(x.shape), " and ", ShapeToString(ind.shape));
  if (upd.shape != ind.shape || upd.dtype != x.dtype)
    ctx.Error("updates must have indices' shape and data's dtype");
  const int axis = static_cast<int>(NormalizeAxis(ctx, ctx.node.GetInt("axis", 0), r));
  for (int d = 0; d < r; ++d)
    if (d != axis && ind.shape[d] > x.shape[d])
      ctx.Error("indices ", ShapeToString(ind.shape), " exceed data ", ShapeToString(x.shape),
                " on axis ", d);
  const Reduction reduction = ParseReduction(ctx);
  ScatterParams& p = ctx.SetParams<ScatterParams>();
  p.axis = axis;
  p.reduction = reduction;
  ctx.SetOutput(0, x.dtype, x.shape);
}

// ScatterND(data, indices, updates; reduction) -> data's dtype and shape.
void InferScatterND(OpContext& ctx) {
  ctx.ExpectDType(1, {DType::kInt64, DType::kInt32});
  const TensorInfo& x = ctx.in(0);
  const TensorInfo& ind = ctx.in(1);
  const TensorInfo& upd = ctx.in(2);
  const int r = x.rank(), q = ind.rank();
  if (r < 1 || q < 1) ctx.Error("data and indices must have rank >= 1");
  if (upd.dtype != x.dtype) ctx.Error("updates must have data's dtype");
  const int64_t k = ind.shape[q - 1];
  if (k < 1 || k > r) ctx.Error("indices' last dim ", k, " must be in [1, ", r, "]");
  Shape want(ind.shape.begin(), ind.shape.end() - 1);
  want.insert(want.end(), x.shape.begin() + k, x.shape.end());
  if (upd.shape != want)
    ctx.Error("updates have shape ", ShapeToString(upd.shape), ", expected ",
              ShapeToString(want));
  ctx.SetParams<ScatterParams>().reduction = ParseReduction(ctx);
  ctx.SetOutput(0, x.dtype, x.shape);
}

// TopK(X, K; axis, largest, sorted) -> values (X's dtype), int64 indices.
void InferTopK(OpContext& ctx) {
  ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32,
                      DType::kInt8, DType::kUInt8, DType::kInt16});
  const TensorInfo& x = ctx.in(0);
  if (x.rank() < 1) ctx.Error("X must have rank >= 1");
  std::vector<int64_t> k = ctx.ConstInts(1);
  if (k.size() != 1) ctx.Error("K must have one element, got ", k.size());
  const int64_t axis = NormalizeAxis(ctx, ctx.node.GetInt("axis", -1), x.rank());
  const int64_t dim = x.shape[axis];
  if (k[0] < 0 || k[0] > dim)
    ctx.Error("K = ", k[0], " is out of range for an axis of size ", dim);
  TopKParams& p = ctx.SetParams<TopKParams>();
  p.axis = static_cast<int>(axis);
  p.k = k[0];
  p.largest = ctx.node.GetInt("largest", 1) != 0;
  Shape out = x.shape;
  out[axis] = p.k;
  ctx.SetOutput(0, x.dtype, out);
  if (ctx.node.outputs.size() > 1 && ctx.node.outputs[1] >= 0)
    ctx.SetOutput(1, DType::kInt64, out);
}

// CumSum(X, axis; exclusive, reverse) -> X's dtype and shape.
void InferCumSum(OpContext& ctx) {
  ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64});
  const TensorInfo& x = ctx.in(0);
  if (x.rank() < 1) ctx.Error("X must have rank >= 1");
  std::vector<int64_t> axis = ctx.ConstInts(1);
  if (axis.size() != 1) ctx.Error("axis must have one element, got ", axis.size());
  CumSumParams& p = ctx.SetParams<CumSumParams>();
  p.axis = static_cast<int>(NormalizeAxis(ctx, axis[0], x.rank()));
  p.exclusive = ctx.node.GetInt("exclusive", 0) != 0;
  p.reverse = ctx.node.GetInt("reverse", 0) != 0;
  ctx.SetOutput(0, x.dtype, x.shape);
}

}  // namespace

void RegisterGameOps(OpRegistry& r) {
  r.Define(OpId::kResize, &InferResize);
  r.Define(OpId::kScatterElements, &InferScatterElements);
  r.Define(OpId::kScatterND, &InferScatterND);
  r.Define(OpId::kTopK, &InferTopK);
  r.Define(OpId::kCumSum, &InferCumSum);
}

}  // namespace kaiwu
