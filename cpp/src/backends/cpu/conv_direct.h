// Direct 2-D Conv for stride 1, no dilation, one group, on AVX-512: output
// pixels in vector lanes, read straight from the NCHW input with masked loads
// (no im2col panel is packed). A segment is 16 output pixels: 16 of one output
// row (rows of 16+ pixels), or, when the input is as wide as the output (the
// "same" padded 3x3 layers of residual networks, any width), 16 consecutive
// pixels of the flattened image, which read 16 consecutive input floats per
// tap. Each task is one strip of kSegs segments of one image; 8 output
// channels at a time accumulate in registers over every (tap, input channel).
// The input offset and lane mask of every (tap, segment) are computed once,
// at construction. Used for the 3x3 layers of residual policy networks, where
// packing the panel cost about as much as a third of the multiply.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/activation.h"
#include "ops/conv_geometry.h"
#include "core/thread_pool.h"

namespace kaiwu {
namespace cpu {

class ConvDirect {
 public:
  static constexpr int kSegs = 3;  // 16-pixel segments per strip (3 x 8 accumulators)
  static constexpr int kMr = 8;    // output channels per register tile

  static bool Supported(const SpatialGeometry& g, int64_t n, int64_t c, int64_t m, int64_t group);
  ConvDirect() = default;
  ConvDirect(const SpatialGeometry& g, int64_t n, int64_t c, int64_t m, const Activation& act);
  /// y = act(conv(x, w) + bias).
  void Run(const float* x, const float* w, const float* bias, float* y, ThreadPool* pool) const;

 private:
  void Strip(const float* x, const float* w, const float* bias, float* y, int64_t img,
             int64_t seg0) const;

  SpatialGeometry geo_;
  Activation act_;
  int64_t n_ = 0, c_ = 0, m_ = 0, k_ = 0;
  int64_t segs_ = 0, strips_ = 0;  // per image
  // Per (tap, segment), tap-major: input offset of lane 0 (within one input
  // channel), lanes that read inside the input; per segment: output offset
  // and lanes inside the output.
  std::vector<int64_t> in_off_;
  std::vector<uint16_t> in_mask_;
  std::vector<int64_t> out_off_;
  std::vector<uint16_t> out_mask_;
};

}  // namespace cpu
}  // namespace kaiwu
