// The im2col of the fused int8 conv (quant_fused.cc): lanes are output pixels
// of a chunk of images, each int32 lane of a quad row holds 4 consecutive k =
// (channel, tap) of its pixel, byte t = k mod 4.
#pragma once

#include <cstdint>

#include "ops/conv_geometry.h"

namespace kaiwu {
namespace cpu {

/// Writes quad row q (k = 4q .. 4q + 3) for the imgs images of x (uint8 bytes
/// [imgs][channels][in...]) to out[0, lanes): lane l = (image l / P, pixel l
/// % P) for l < imgs * P, 0 beyond. Byte t of a lane is x ^ flip at tap k, or
/// pad where the tap reads the padding, 0 for k >= k_total.
void QIm2ColQuad(const SpatialGeometry& g, int64_t k_total, const uint8_t* x, int64_t imgs,
                 int64_t channels, int64_t q, uint8_t flip, uint8_t pad, uint32_t* out, int64_t lanes);

}  // namespace cpu
}  // namespace kaiwu
