#include "ops/conv_geometry.h"

#include <algorithm>
#include <string>

namespace kaiwu {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) {  // b > 0
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

int64_t FloorDiv(int64_t a, int64_t b) {  // b > 0
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

}  // namespace

Shape SpatialGeometry::OutShape() const { return Shape(out + 3 - nd, out + 3); }

bool SpatialGeometry::IsPointwise() const {
  for (int d = 0; d < 3; ++d)
    if (kernel[d] != 1 || stride[d] != 1 || pad_begin[d] != 0 || pad_end[d] != 0) return false;
  return true;
}

SpatialGeometry MakeGeometry(const OpContext& ctx, const Shape& in,
                             const std::vector<int64_t>& kernel, bool allow_ceil) {
  const Node& node = ctx.node;
  const int nd = static_cast<int>(in.size());
  if (nd < 1 || nd > 3) ctx.Error("supports 1 to 3 spatial dims, got ", nd);
  if (static_cast<int>(kernel.size()) != nd)
    ctx.Error("kernel has ", kernel.size(), " dims, input has ", nd, " spatial dims");
  std::vector<int64_t> strides = node.GetInts("strides", std::vector<int64_t>(nd, 1));
  std::vector<int64_t> dilations = node.GetInts("dilations", std::vector<int64_t>(nd, 1));
  std::vector<int64_t> pads = node.GetInts("pads", std::vector<int64_t>(2 * nd, 0));
  if (strides.empty()) strides.assign(nd, 1);
  if (dilations.empty()) dilations.assign(nd, 1);
  if (pads.empty()) pads.assign(2 * nd, 0);
  if (static_cast<int>(strides.size()) != nd || static_cast<int>(dilations.size()) != nd ||
      static_cast<int>(pads.size()) != 2 * nd)
    ctx.Error("strides/dilations need ", nd, " values and pads ", 2 * nd);
  const std::string auto_pad = node.GetString("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER" &&
      auto_pad != "VALID")
    ctx.Error("unknown auto_pad '", auto_pad, "'");
  const bool ceil_mode = allow_ceil && node.GetInt("ceil_mode", 0) != 0;

  SpatialGeometry g;
  g.nd = nd;
  for (int i = 0; i < nd; ++i) {
    const int d = 3 - nd + i;
    if (kernel[i] < 1 || strides[i] < 1 || dilations[i] < 1 || pads[i] < 0 || pads[nd + i] < 0)
      ctx.Error("kernel, strides and dilations must be positive and pads non-negative");
    g.in[d] = in[i];
    g.kernel[d] = kernel[i];
    g.stride[d] = strides[i];
    g.dilation[d] = dilations[i];
    const int64_t window = (kernel[i] - 1) * dilations[i] + 1;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      g.out[d] = CeilDiv(in[i], strides[i]);
      int64_t total = std::max<int64_t>(0, (g.out[d] - 1) * strides[i] + window - in[i]);
      int64_t small = total / 2, large = total - small;
      g.pad_begin[d] = auto_pad == "SAME_UPPER" ? small : large;
      g.pad_end[d] = total - g.pad_begin[d];
    } else {
      if (auto_pad == "NOTSET") {
        g.pad_begin[d] = pads[i];
        g.pad_end[d] = pads[nd + i];
      }
      const int64_t span = in[i] + g.pad_begin[d] + g.pad_end[d] - window;
      if (span < 0)
        ctx.Error("window ", window, " is larger than the padded input ",
                  in[i] + g.pad_begin[d] + g.pad_end[d]);
      if (ceil_mode) {
        g.out[d] = CeilDiv(span, strides[i]) + 1;
        // The last window must start inside the input or its leading pad.
        if ((g.out[d] - 1) * strides[i] >= in[i] + g.pad_begin[d]) --g.out[d];
      } else {
        g.out[d] = FloorDiv(span, strides[i]) + 1;
      }
    }
    if (g.out[d] < 0) ctx.Error("negative output size");
  }
  for (int d = 0; d < 3; ++d)
    for (int64_t k = 0; k < g.kernel[d]; ++k) {
      int64_t off = k * g.dilation[d] - g.pad_begin[d];  // input coord = o * stride + off
      int64_t lo = std::clamp<int64_t>(CeilDiv(-off, g.stride[d]), 0, g.out[d]);
      g.valid_lo[d].push_back(lo);
      g.valid_hi[d].push_back(std::clamp<int64_t>(CeilDiv(g.in[d] - off, g.stride[d]), lo, g.out[d]));
    }
  return g;
}

}  // namespace kaiwu
