// Shape inference of Pad: modes constant / reflect / edge / wrap; pads from
// input 1 (opset 11+, the `pads` attribute before), constant_value from input
// 2 (read when the step runs), axes from input 3 (opset 18+). Negative pads crop.
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype_dispatch.h"
#include "core/half.h"
#include "ops/tensor.h"

namespace kaiwu {
namespace {

void InferPad(OpContext& ctx) {
  const TensorInfo& x = ctx.in(0);
  const int rank = x.rank();
  PadParams& p = ctx.SetParams<PadParams>();
  std::string mode = ctx.node.GetString("mode", "constant");
  if (mode == "constant") p.mode = PadMode::kConstant;
  else if (mode == "reflect") p.mode = PadMode::kReflect;
  else if (mode == "edge") p.mode = PadMode::kEdge;
  else if (mode == "wrap") p.mode = PadMode::kWrap;
  else ctx.Error("unknown mode '", mode, "'");

  std::vector<int64_t> pads, axes;
  if (ctx.node.opset >= 11) {
    pads = ctx.ConstInts(1);
    p.has_value_input = ctx.HasInput(2) && ctx.in(2).size() > 0;
    if (p.has_value_input && (ctx.in(2).dtype != x.dtype || ctx.in(2).size() != 1))
      ctx.Error("constant_value must be one ", DTypeName(x.dtype), " element");
    if (ctx.HasInput(3)) axes = ctx.ConstInts(3);
  } else {
    pads = ctx.node.GetInts("pads");
    float v = ctx.node.GetFloat("value", 0.f);
    if (v != 0.f && (x.dtype == DType::kFloat16 || x.dtype == DType::kBFloat16)) {
      const uint16_t h = x.dtype == DType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v);
      std::memcpy(p.default_value, &h, sizeof(h));
    } else if (v != 0.f) {
      KAIWU_DISPATCH_ALL(x.dtype, {
        T t = static_cast<T>(v);
        std::memcpy(p.default_value, &t, sizeof(T));
      });
    }
  }
  if (axes.empty()) {
    for (int d = 0; d < rank; ++d) axes.push_back(d);
  }
  if (pads.size() != 2 * axes.size())
    ctx.Error("pads has ", pads.size(), " entries, expected ", 2 * axes.size());
  std::vector<int64_t> end(rank, 0);
  p.begin.assign(rank, 0);
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = NormalizeAxis(ctx, axes[i], rank);
    if (seen[a]) ctx.Error("axis ", axes[i], " is repeated");
    seen[a] = true;
    p.begin[a] = pads[i];
    end[a] = pads[i + axes.size()];
  }

  Shape out(rank);
  for (int d = 0; d < rank; ++d) {
    const int64_t dim = x.shape[d];
    out[d] = dim + p.begin[d] + end[d];
    if (out[d] < 0) ctx.Error("pads make axis ", d, " negative");
    if (dim == 0 && out[d] > 0 && p.mode != PadMode::kConstant)
      ctx.Error("cannot pad an empty axis in ", mode, " mode");
  }
  ctx.SetOutput(0, x.dtype, std::move(out));
}

}  // namespace

void RegisterTensorPadOps(OpRegistry& r) { r.Define(OpId::kPad, &InferPad); }

}  // namespace kaiwu
