#include "backends/cpu/game_util.h"

namespace kaiwu {
namespace cpu {

void RegisterGameKernels(KernelRegistry& r) {
  RegisterGameResizeKernels(r);
  RegisterGameOneHotKernels(r);
  RegisterGameGatherNDKernels(r);
  RegisterGameScatterNDKernels(r);
  RegisterGameScatterElementsKernels(r);
  RegisterGameTopKKernels(r);
  RegisterGameCumSumKernels(r);
}

std::vector<double> ConstNumbers(const PrepareContext& ctx, int i) {
  const TensorInfo& t = ctx.in(i);
  if (!t.data)
    ctx.Error("input ", i, " must be known when the plan is built (a constant or computed from "
              "shapes); data-dependent shapes are not supported");
  std::vector<double> out(static_cast<size_t>(t.size()));
  for (size_t k = 0; k < out.size(); ++k) {
    switch (t.dtype) {
      case DType::kFloat32: out[k] = t.As<float>()[k]; break;
      case DType::kFloat64: out[k] = t.As<double>()[k]; break;
      case DType::kInt8: out[k] = t.As<int8_t>()[k]; break;
      case DType::kUInt8: out[k] = t.As<uint8_t>()[k]; break;
      case DType::kInt16: out[k] = t.As<int16_t>()[k]; break;
      case DType::kInt32: out[k] = t.As<int32_t>()[k]; break;
      case DType::kInt64: out[k] = static_cast<double>(t.As<int64_t>()[k]); break;
      default: ctx.Error("input ", i, " has unsupported dtype ", DTypeName(t.dtype));
    }
  }
  return out;
}

Reduction ParseReduction(const PrepareContext& ctx) {
  const std::string r = ctx.node.GetString("reduction", "none");
  if (r == "none") return Reduction::kNone;
  if (r == "add") return Reduction::kAdd;
  if (r == "mul") return Reduction::kMul;
  if (r == "max") return Reduction::kMax;
  if (r == "min") return Reduction::kMin;
  ctx.Error("unknown reduction '", r, "'");
}

std::vector<int64_t> RowMajorStrides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
  return s;
}

}  // namespace cpu
}  // namespace kaiwu
