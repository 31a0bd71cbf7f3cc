// Resize's meaning as separable per-axis taps: for each output coordinate of
// an axis, the input offsets it reads and their weights (1 tap for nearest, 2
// for linear, 4 for cubic). Coordinates are computed in float as onnxruntime
// does. Shape inference (InferResize) turns a node's attributes and shape
// operands into the output shape and the taps of every axis (ResizeParams);
// the CPU and CUDA kernels both compute from them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/op_context.h"

namespace kaiwu {

enum class ResizeMode { kNearest, kLinear, kCubic };
enum class CoordMode {
  kHalfPixel, kHalfPixelSymmetric, kPytorchHalfPixel, kAlignCorners, kAsymmetric,
  kTfHalfPixelForNN, kTfCropAndResize
};
enum class NearestMode { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil };

struct ResizeOptions {
  ResizeMode mode = ResizeMode::kNearest;
  CoordMode coord = CoordMode::kHalfPixel;
  NearestMode nearest = NearestMode::kRoundPreferFloor;
  float cubic_a = -0.75f;
  bool exclude_outside = false;
};

/// Reads mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a and
/// exclude_outside; refuses antialias=1 and unknown values with ctx.Error.
ResizeOptions ParseResizeOptions(const OpContext& ctx);

/// Output coordinate o of one axis reads input offsets offset[o * taps + t]
/// (element offsets: index * the axis stride) weighted by weight[o * taps + t].
/// outside[o] (tf_crop_and_resize only; else empty) marks outputs that take the
/// extrapolation value.
struct AxisTaps {
  int taps = 1;
  std::vector<int64_t> offset;
  std::vector<float> weight;
  std::vector<uint8_t> outside;
  bool identity = false;  // in == out, scale 1: offset[o] = o * stride, weight 1

  bool identity_weights() const;  // one tap of weight 1 everywhere, nothing outside
};

/// Taps of an axis of input size `in` resized to `out` with `scale` (the given
/// scale, or out / in when sizes were given); roi_* only for tf_crop_and_resize.
/// Taps that reduce to a single weight-1 tap per output are collapsed to one; an
/// axis with in == out and scale 1 (and no crop) is the identity in every mode.
AxisTaps MakeAxisTaps(const ResizeOptions& opt, int64_t in, int64_t out, float scale,
                      float roi_start, float roi_end, int64_t stride);

/// Most axes X may have.
constexpr int kMaxResizeRank = 16;

/// What Resize's shape inference derives from X, the attributes and the shape
/// operands (roi, scales, sizes, all known at plan time).
struct ResizeParams : OpParams {
  Shape out;                   // the output shape
  float extrapolation = 0.f;   // tf_crop_and_resize's value outside the roi
  std::vector<AxisTaps> axes;  // per axis of X; offsets in elements of a row-major X
};

/// Checks X (rank 1 to kMaxResizeRank; float32 / float64 for linear and cubic),
/// the attributes (scales or sizes, axes, keep_aspect_ratio_policy, roi) with
/// ctx.Error on a model error, and fills *plan. Sets no output.
void PlanResize(const OpContext& ctx, ResizeParams* plan);

/// Shape inference: PlanResize into ctx's params, output 0 of X's dtype.
void InferResize(OpContext& ctx);

}  // namespace kaiwu
