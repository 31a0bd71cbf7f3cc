// The two inner routines of Conv: im2col for the GEMM path and a direct loop
// for depthwise convolutions.
#pragma once

#include <cstdint>

#include "ops/conv_geometry.h"

namespace kaiwu {
namespace cpu {

/// Fills rows [c_begin * K, c_end * K) of col[Cg * K, P] (K = kernel size,
/// P = output size; rows `ld` floats apart, ld >= P, so several images can sit
/// side by side) from the channels [c_begin, c_end) of x[Cg, in...]; taps
/// falling into the padding read 0.
void Im2Col(const SpatialGeometry& g, const float* x, int64_t c_begin, int64_t c_end, float* col,
            int64_t ld);

/// One output plane of a depthwise convolution: y[out...] = bias +
/// sum over taps of w[tap] * x[in...] (x is the single input plane).
void DepthwisePlane(const SpatialGeometry& g, const float* x, const float* w, float bias, float* y);

}  // namespace cpu
}  // namespace kaiwu
