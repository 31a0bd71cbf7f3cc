#include "ops/resize.h"

#include <algorithm>
#include <cmath>

#include "ops/game.h"

namespace kaiwu {
namespace {

float Original(CoordMode mode, float x, float scale, float out, float in, float roi_start,
               float roi_end) {
  switch (mode) {
    case CoordMode::kHalfPixel:
      return (x + 0.5f) / scale - 0.5f;
    case CoordMode::kHalfPixelSymmetric: {
      const float adjustment = out / (scale * in);
      const float offset = in / 2 * (1 - adjustment);
      return offset + (x + 0.5f) / scale - 0.5f;
    }
    case CoordMode::kPytorchHalfPixel:
      return out > 1 ? (x + 0.5f) / scale - 0.5f : 0.f;
    case CoordMode::kAlignCorners:
      return out == 1 ? 0.f : x * (in - 1) / (out - 1);
    case CoordMode::kAsymmetric:
      return x / scale;
    case CoordMode::kTfHalfPixelForNN:
      return (x + 0.5f) / scale;
    case CoordMode::kTfCropAndResize:
      return out > 1 ? roi_start * (in - 1) + x * (roi_end - roi_start) * (in - 1) / (out - 1)
                     : 0.5f * (roi_start + roi_end) * (in - 1);
  }
  return 0.f;
}

int64_t Nearest(NearestMode mode, float x) {
  switch (mode) {
    case NearestMode::kRoundPreferFloor:
      if (x == static_cast<float>(static_cast<int64_t>(x)) + 0.5f)
        return static_cast<int64_t>(std::floor(x));
      return static_cast<int64_t>(std::round(x));
    case NearestMode::kRoundPreferCeil:
      return static_cast<int64_t>(std::round(x));
    case NearestMode::kFloor:
      return static_cast<int64_t>(std::floor(x));
    case NearestMode::kCeil:
      return static_cast<int64_t>(std::ceil(x));
  }
  return 0;
}

void CubicCoeffs(float s, float a, float c[4]) {
  const float s1 = s + 1, t = 1 - s, t1 = t + 1;
  c[0] = ((a * s1 - 5 * a) * s1 + 8 * a) * s1 - 4 * a;
  c[1] = ((a + 2) * s - (a + 3)) * s * s + 1;
  c[2] = ((a + 2) * t - (a + 3)) * t * t + 1;
  c[3] = ((a * t1 - 5 * a) * t1 + 8 * a) * t1 - 4 * a;
}

template <typename E>
E Pick(const OpContext& ctx, const char* attr, const std::string& fallback,
       std::initializer_list<std::pair<const char*, E>> values) {
  const std::string v = ctx.node.GetString(attr, fallback);
  for (const auto& [name, e] : values)
    if (v == name) return e;
  ctx.Error("unsupported ", attr, " '", v, "'");
}

}  // namespace

ResizeOptions ParseResizeOptions(const OpContext& ctx) {
  if (ctx.node.GetInt("antialias", 0) != 0) ctx.Error("antialias=1 is not supported");
  ResizeOptions o;
  o.mode = Pick<ResizeMode>(ctx, "mode", "nearest",
                            {{"nearest", ResizeMode::kNearest}, {"linear", ResizeMode::kLinear},
                             {"cubic", ResizeMode::kCubic}});
  o.coord = Pick<CoordMode>(ctx, "coordinate_transformation_mode", "half_pixel",
                            {{"half_pixel", CoordMode::kHalfPixel},
                             {"half_pixel_symmetric", CoordMode::kHalfPixelSymmetric},
                             {"pytorch_half_pixel", CoordMode::kPytorchHalfPixel},
                             {"align_corners", CoordMode::kAlignCorners},
                             {"asymmetric", CoordMode::kAsymmetric},
                             {"tf_half_pixel_for_nn", CoordMode::kTfHalfPixelForNN},
                             {"tf_crop_and_resize", CoordMode::kTfCropAndResize}});
  o.nearest = Pick<NearestMode>(ctx, "nearest_mode", "round_prefer_floor",
                                {{"round_prefer_floor", NearestMode::kRoundPreferFloor},
                                 {"round_prefer_ceil", NearestMode::kRoundPreferCeil},
                                 {"floor", NearestMode::kFloor},
                                 {"ceil", NearestMode::kCeil}});
  o.cubic_a = ctx.node.GetFloat("cubic_coeff_a", -0.75f);
  o.exclude_outside = ctx.node.GetInt("exclude_outside", 0) != 0;
  return o;
}

bool AxisTaps::identity_weights() const {
  if (taps != 1 || !outside.empty()) return false;
  for (float w : weight)
    if (w != 1.f) return false;
  return true;
}

AxisTaps MakeAxisTaps(const ResizeOptions& opt, int64_t in, int64_t out, float scale,
                      float roi_start, float roi_end, int64_t stride) {
  AxisTaps a;
  const bool crops =
      opt.coord == CoordMode::kTfCropAndResize && (roi_start != 0.f || roi_end != 1.f);
  if (in == out && scale == 1.f && !crops) {  // an axis left alone (as onnxruntime and the
    a.offset.resize(out);                      // reference do, even for tf_half_pixel_for_nn)
    for (int64_t o = 0; o < out; ++o) a.offset[o] = o * stride;
    a.weight.assign(out, 1.f);
    a.identity = true;
    return a;
  }
  a.taps = opt.mode == ResizeMode::kNearest ? 1 : opt.mode == ResizeMode::kLinear ? 2 : 4;
  a.offset.resize(out * a.taps);
  a.weight.resize(out * a.taps);
  if (opt.coord == CoordMode::kTfCropAndResize) a.outside.assign(out, 0);
  const float fin = static_cast<float>(in), fout = static_cast<float>(out);
  auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
  for (int64_t o = 0; o < out; ++o) {
    const float x =
        Original(opt.coord, static_cast<float>(o), scale, fout, fin, roi_start, roi_end);
    if (!a.outside.empty()) a.outside[o] = x < 0 || x > fin - 1;
    int64_t* off = &a.offset[o * a.taps];
    float* w = &a.weight[o * a.taps];
    if (opt.mode == ResizeMode::kNearest) {
      off[0] = clamp(Nearest(opt.nearest, x));
      w[0] = 1.f;
    } else if (opt.mode == ResizeMode::kLinear) {
      const float xc = std::clamp(x, 0.f, fin - 1);
      const int64_t x0 = std::min<int64_t>(static_cast<int64_t>(xc), in - 1);
      off[0] = x0;
      off[1] = std::min<int64_t>(x0 + 1, in - 1);
      w[1] = xc - static_cast<float>(x0);
      w[0] = 1.f - w[1];
    } else {
      const float fl = std::floor(x);
      const int64_t x0 = static_cast<int64_t>(fl);
      CubicCoeffs(x - fl, opt.cubic_a, w);
      float sum = 0.f;
      for (int t = 0; t < 4; ++t) {
        const int64_t i = x0 - 1 + t;
        if (opt.exclude_outside && (i < 0 || i >= in)) w[t] = 0.f;
        sum += w[t];
        off[t] = clamp(i);
      }
      if (opt.exclude_outside && sum != 0.f)
        for (int t = 0; t < 4; ++t) w[t] /= sum;
    }
    for (int t = 0; t < a.taps; ++t) off[t] *= stride;
  }
  // Collapse to one tap where each output has exactly one nonzero weight of 1.
  bool single = a.taps > 1;
  std::vector<int64_t> off1(out);
  for (int64_t o = 0; o < out && single; ++o) {
    int nonzero = 0;
    for (int t = 0; t < a.taps; ++t) {
      float w = a.weight[o * a.taps + t];
      if (w == 0.f) continue;
      ++nonzero;
      single &= w == 1.f;
      off1[o] = a.offset[o * a.taps + t];
    }
    single &= nonzero == 1;
  }
  if (single) {
    a.taps = 1;
    a.offset = std::move(off1);
    a.weight.assign(out, 1.f);
  }
  return a;
}

void PlanResize(const OpContext& ctx, ResizeParams* plan) {
  ResizeOptions opt = ParseResizeOptions(ctx);
  const TensorInfo& x = ctx.in(0);
  const int r = x.rank();
  if (r < 1 || r > kMaxResizeRank) ctx.Error("X must have rank 1 to ", kMaxResizeRank);
  if (opt.mode != ResizeMode::kNearest && x.dtype != DType::kFloat32 &&
      x.dtype != DType::kFloat64)
    ctx.Error("linear and cubic modes need float32 or float64 input, got ", DTypeName(x.dtype));
  plan->extrapolation = ctx.node.GetFloat("extrapolation_value", 0.f);

  std::vector<int64_t> axes = ctx.node.GetInts("axes");
  if (axes.empty())
    for (int d = 0; d < r; ++d) axes.push_back(d);
  for (int64_t& a : axes) a = NormalizeAxis(ctx, a, r);
  const size_t na = axes.size();
  auto given = [&](int i) { return ctx.HasInput(i) && ctx.in(i).size() > 0; };
  if (given(2) == given(3)) ctx.Error("exactly one of scales and sizes must be given");
  std::vector<float> scale(r, 1.f), roi_start(r, 0.f), roi_end(r, 1.f);
  Shape out = x.shape;
  if (given(2)) {
    std::vector<double> s = ConstNumbers(ctx, 2);
    if (s.size() != na) ctx.Error("scales has ", s.size(), " values, expected ", na);
    for (size_t i = 0; i < na; ++i) {
      if (!(s[i] > 0)) ctx.Error("scales must be positive");
      scale[axes[i]] = static_cast<float>(s[i]);
      out[axes[i]] = static_cast<int64_t>(scale[axes[i]] * static_cast<float>(x.shape[axes[i]]));
    }
  } else {
    std::vector<int64_t> sizes = ctx.ConstInts(3);
    if (sizes.size() != na) ctx.Error("sizes has ", sizes.size(), " values, expected ", na);
    const std::string policy = ctx.node.GetString("keep_aspect_ratio_policy", "stretch");
    if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller")
      ctx.Error("unknown keep_aspect_ratio_policy '", policy, "'");
    float pick = policy == "not_larger" ? INFINITY : 0.f;
    for (size_t i = 0; i < na; ++i) {
      const int64_t in = x.shape[axes[i]];
      if (sizes[i] < 0) ctx.Error("sizes must be non-negative");
      if (in == 0 && sizes[i] != 0) ctx.Error("cannot resize an empty axis to ", sizes[i]);
      float s = in == 0 ? 1.f : static_cast<float>(sizes[i]) / static_cast<float>(in);
      scale[axes[i]] = s;
      out[axes[i]] = sizes[i];
      pick = policy == "not_larger" ? std::min(pick, s) : std::max(pick, s);
    }
    if (policy != "stretch")
      for (int64_t a : axes) {
        scale[a] = pick;
        out[a] = static_cast<int64_t>(std::floor(pick * static_cast<float>(x.shape[a]) + 0.5f));
      }
  }
  if (opt.coord == CoordMode::kTfCropAndResize) {
    if (!given(1)) ctx.Error("tf_crop_and_resize needs roi");
    std::vector<double> roi = ConstNumbers(ctx, 1);
    if (roi.size() != 2 * na) ctx.Error("roi has ", roi.size(), " values, expected ", 2 * na);
    for (size_t i = 0; i < na; ++i) {
      roi_start[axes[i]] = static_cast<float>(roi[i]);
      roi_end[axes[i]] = static_cast<float>(roi[na + i]);
    }
  }

  const std::vector<int64_t> strides = Strides(x.shape);
  plan->axes.clear();
  for (int d = 0; d < r; ++d)
    plan->axes.push_back(MakeAxisTaps(opt, x.shape[d], out[d], scale[d], roi_start[d], roi_end[d],
                                     strides[d]));
  plan->out = std::move(out);
}

void InferResize(OpContext& ctx) {
  ResizeParams& plan = ctx.SetParams<ResizeParams>();
  PlanResize(ctx, &plan);
  ctx.SetOutput(0, ctx.in(0).dtype, plan.out);
}

}  // namespace kaiwu
