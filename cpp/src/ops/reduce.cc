// Shape inference of Reduce*, ArgMax, ArgMin.
#include "ops/reduce.h"

#include "ops/op_registry.h"

namespace kaiwu {
namespace {

using reduce::ReduceKind;

/// Which of the `rank` input dims a Reduce* node reduces: its axes (input 1,
/// else the "axes" attribute; negative ones count from the end), or every dim
/// when none are given. With no axes and noop_with_empty_axes none is reduced
/// and *copy is set (the output is the input). Errors on a bad or repeated axis.
std::vector<bool> ReducedDims(const OpContext& ctx, int64_t rank, bool* copy) {
  std::vector<int64_t> axes =
      ctx.HasInput(1) ? ctx.ConstInts(1) : ctx.node.GetInts("axes", std::vector<int64_t>{});
  const bool noop = ctx.node.GetInt("noop_with_empty_axes", 0) != 0;
  *copy = axes.empty() && noop;
  std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty() && !noop);
  for (int64_t a : axes) {
    int64_t ax = a < 0 ? a + rank : a;
    if (ax < 0 || ax >= rank) ctx.Error("axis ", a, " is out of range for rank ", rank);
    if (reduced[ax]) ctx.Error("axis ", a, " is repeated");
    reduced[ax] = true;
  }
  return reduced;
}

// Reduce*: Max and Min also take small integers and bool; LogSumExp only floats.
template <ReduceKind K>
void InferReduce(OpContext& ctx) {
  if (K == ReduceKind::kMax || K == ReduceKind::kMin)
    ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64,
                        DType::kInt8, DType::kUInt8, DType::kBool, DType::kFloat16,
                        DType::kBFloat16});
  else if (K == ReduceKind::kLogSumExp)
    ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16});
  else
    ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64,
                        DType::kFloat16, DType::kBFloat16});
  const Shape& in = ctx.in(0).shape;
  const int64_t rank = static_cast<int64_t>(in.size());
  if (rank > kMaxReduceRank) ctx.Error("rank ", rank, " exceeds ", kMaxReduceRank);

  ReduceParams& p = ctx.SetParams<ReduceParams>();
  p.kind = K;
  p.reduced = ReducedDims(ctx, rank, &p.copy);
  const bool keepdims = ctx.node.GetInt("keepdims", 1) != 0;

  Shape out;
  p.count = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (p.reduced[d]) {
      p.count *= in[d];
      if (keepdims) out.push_back(1);
    } else {
      out.push_back(in[d]);
    }
  }
  ctx.SetOutput(0, ctx.in(0).dtype, out);
}

// ArgMax / ArgMin (axis, keepdims, select_last_index) -> int64 indices.
template <bool kMax>
void InferArgReduce(OpContext& ctx) {
  ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64,
                      DType::kInt8, DType::kUInt8, DType::kInt16, DType::kFloat16,
                      DType::kBFloat16});
  const Shape& shape = ctx.in(0).shape;
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (rank == 0) ctx.Error("input must have rank >= 1");
  ArgReduceParams& p = ctx.SetParams<ArgReduceParams>();
  p.is_max = kMax;
  p.axis = NormalizeAxis(ctx, ctx.node.GetInt("axis", 0), rank);
  const bool keepdims = ctx.node.GetInt("keepdims", 1) != 0;
  p.select_last_index = ctx.node.GetInt("select_last_index", 0) != 0;
  if (shape[p.axis] == 0) ctx.Error("cannot take ", ctx.node.op_type, " over an empty axis");
  Shape out;
  for (int64_t d = 0; d < rank; ++d) {
    if (d != p.axis) out.push_back(shape[d]);
    else if (keepdims) out.push_back(1);
  }
  ctx.SetOutput(0, DType::kInt64, out);
}

}  // namespace

void RegisterReduceOps(OpRegistry& r) {
  r.Define(OpId::kReduceSum, &InferReduce<ReduceKind::kSum>);
  r.Define(OpId::kReduceMean, &InferReduce<ReduceKind::kMean>);
  r.Define(OpId::kReduceMax, &InferReduce<ReduceKind::kMax>);
  r.Define(OpId::kReduceMin, &InferReduce<ReduceKind::kMin>);
  r.Define(OpId::kReduceProd, &InferReduce<ReduceKind::kProd>);
  r.Define(OpId::kReduceL1, &InferReduce<ReduceKind::kL1>);
  r.Define(OpId::kReduceL2, &InferReduce<ReduceKind::kL2>);
  r.Define(OpId::kReduceSumSquare, &InferReduce<ReduceKind::kSumSquare>);
  r.Define(OpId::kReduceLogSum, &InferReduce<ReduceKind::kLogSum>);
  r.Define(OpId::kReduceLogSumExp, &InferReduce<ReduceKind::kLogSumExp>);
  r.Define(OpId::kArgMax, &InferArgReduce<true>);
  r.Define(OpId::kArgMin, &InferArgReduce<false>);
}

}  // namespace kaiwu
