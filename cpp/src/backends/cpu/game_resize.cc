// Resize (opset 13+: X, roi, scales, sizes; opset 18+ axes and
// keep_aspect_ratio_policy). Prepare builds per-axis taps (game_resize_taps.h);
// Run walks output rows (all dims but the last) in parallel. Leading axes left
// alone (N and C of NCHW) only pick a plane; a row combines the taps of the
// other outer axes (at most kMaxCombos products, e.g. 2 source rows for
// bilinear) and applies the last axis's taps along the row. Nearest resizes
// (every axis one weight-1 tap) are a pure gather and work for any dtype;
// linear and cubic take float32 / float64.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/game_resize_taps.h"
#include "backends/cpu/game_util.h"

namespace kaiwu {
namespace cpu {
namespace {

constexpr int kMaxCombos = 64;
constexpr int kMaxRank = 16;

class ResizeKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    ResizeOptions opt = ParseResizeOptions(ctx);
    const TensorInfo& x = ctx.in(0);
    const int r = x.rank();
    if (r < 1 || r > kMaxRank) ctx.Error("X must have rank 1 to ", kMaxRank);
    dtype_ = x.dtype;
    if (opt.mode != ResizeMode::kNearest && dtype_ != DType::kFloat32 && dtype_ != DType::kFloat64)
      ctx.Error("linear and cubic modes need float32 or float64 input, got ", DTypeName(dtype_));
    extrapolation_ = ctx.node.GetFloat("extrapolation_value", 0.f);

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
    ctx.SetOutput(0, dtype_, out);

    const std::vector<int64_t> strides = RowMajorStrides(x.shape);
    axes_.clear();
    gather_ = true;
    int combos = 1;
    for (int d = 0; d < r; ++d) {
      axes_.push_back(MakeAxisTaps(opt, x.shape[d], out[d], scale[d], roi_start[d], roi_end[d],
                                   strides[d]));
      gather_ &= axes_.back().identity_weights();
      if (d < r - 1) combos *= axes_.back().taps;
    }
    if (combos > kMaxCombos)
      ctx.Error("resizing this many axes with ", axes_.back().taps, " taps each is not supported");
    out_ = out;
    inner_ = out[r - 1];
    rows_ = inner_ == 0 ? 0 : NumElements(out) / inner_;
    lead_ = 0;
    while (lead_ < r - 1 && axes_[lead_].identity) ++lead_;
    plane_in_ = NumElements(Shape(x.shape.begin() + lead_, x.shape.end()));
    plane_rows_ = NumElements(Shape(out.begin() + lead_, out.end() - 1));
    cost_ = static_cast<double>(inner_) * combos * axes_.back().taps + 8.0 * r;
  }

  void Run(const KernelIO& io) const override {
    if (rows_ == 0) return;
    if (gather_) {
      switch (DTypeSize(dtype_)) {
        case 1: RunRows<uint8_t, true>(io); break;
        case 2: RunRows<uint16_t, true>(io); break;
        case 4: RunRows<uint32_t, true>(io); break;
        default: RunRows<uint64_t, true>(io); break;
      }
    } else if (dtype_ == DType::kFloat64) {
      RunRows<double, false>(io);
    } else {
      RunRows<float, false>(io);
    }
  }

 private:
  // kGather: every axis is one weight-1 tap (T is then just an element of the
  // right size); otherwise T is float or double and rows are weighted sums.
  template <typename T, bool kGather>
  void RunRows(const KernelIO& io) const {
    const T* x = static_cast<const T*>(io.inputs[0]);
    T* y = static_cast<T*>(io.outputs[0]);
    io.pool->ParallelFor(rows_, cost_, [&](int64_t r0, int64_t r1) {
      const int outer = static_cast<int>(out_.size()) - 1;
      int64_t coord[kMaxRank] = {0};  // of axes lead_ .. outer - 1
      int64_t plane = r0 / plane_rows_, rem = r0 % plane_rows_;
      for (int d = outer - 1; d >= lead_; --d) {
        coord[d] = rem % out_[d];
        rem /= out_[d];
      }
      int64_t off[kMaxCombos];
      float w[kMaxCombos];
      const AxisTaps& last = axes_[outer];
      for (int64_t row = r0; row < r1; ++row) {
        T* yr = y + row * inner_;
        int n = 1;
        off[0] = plane * plane_in_;
        w[0] = 1.f;
        bool outside = false;
        for (int d = lead_; d < outer; ++d) {
          const AxisTaps& a = axes_[d];
          const int64_t o = coord[d];
          if (!a.outside.empty() && a.outside[o]) outside = true;
          for (int c = n - 1; c >= 0; --c)  // expand each combo by the axis's taps
            for (int t = a.taps - 1; t >= 0; --t) {
              off[c * a.taps + t] = off[c] + a.offset[o * a.taps + t];
              w[c * a.taps + t] = w[c] * a.weight[o * a.taps + t];
            }
          n *= a.taps;
        }
        if constexpr (kGather) {
          const T* xr = x + off[0];
          for (int64_t j = 0; j < inner_; ++j) yr[j] = xr[last.offset[j]];
        } else {
          if (outside) {
            std::fill(yr, yr + inner_, static_cast<T>(extrapolation_));
          } else {
            WeightedRow(x, off, w, n, last, yr);
          }
        }
        int d = outer - 1;
        for (; d >= lead_; --d) {
          if (++coord[d] < out_[d]) break;
          coord[d] = 0;
        }
        if (d < lead_) ++plane;
      }
    });
  }

  template <typename T>
  void WeightedRow(const T* x, const int64_t* off, const float* w, int n, const AxisTaps& last,
                   T* yr) const {
    const int taps = last.taps;
    const int64_t* lo = last.offset.data();
    const float* lw = last.weight.data();
    if (n == 2 && taps == 2) {  // bilinear: one pass over the row
      const T* x0 = x + off[0];
      const T* x1 = x + off[1];
      const T w0 = static_cast<T>(w[0]), w1 = static_cast<T>(w[1]);
      for (int64_t j = 0; j < inner_; ++j) {
        const int64_t a = lo[2 * j], b = lo[2 * j + 1];
        const T wa = static_cast<T>(lw[2 * j]), wb = static_cast<T>(lw[2 * j + 1]);
        yr[j] = w0 * (wa * x0[a] + wb * x0[b]) + w1 * (wa * x1[a] + wb * x1[b]);
      }
    } else {
      std::fill(yr, yr + inner_, T(0));
      for (int c = 0; c < n; ++c) {
        if (w[c] == 0.f) continue;
        const T* xr = x + off[c];
        const T wc = static_cast<T>(w[c]);
        for (int64_t j = 0; j < inner_; ++j) {
          T acc = 0;
          for (int t = 0; t < taps; ++t)
            acc += static_cast<T>(lw[j * taps + t]) * xr[lo[j * taps + t]];
          yr[j] += wc * acc;
        }
      }
    }
    if (!last.outside.empty())
      for (int64_t j = 0; j < inner_; ++j)
        if (last.outside[j]) yr[j] = static_cast<T>(extrapolation_);
  }

  DType dtype_ = DType::kFloat32;
  float extrapolation_ = 0.f;
  std::vector<AxisTaps> axes_;
  Shape out_;
  int64_t rows_ = 0, inner_ = 0;
  int lead_ = 0;                            // leading identity axes: a plane index
  int64_t plane_in_ = 0, plane_rows_ = 1;  // input elements and output rows per plane
  double cost_ = 1.0;
  bool gather_ = true;
};

}  // namespace

void RegisterGameResizeKernels(KernelRegistry& r) {
  r.Register("Resize", &MakeKernel<ResizeKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
