// Resize (opset 13+: X, roi, scales, sizes; opset 18+ axes and
// keep_aspect_ratio_policy). Prepare takes the per-axis taps that shape
// inference computed (ResizeParams, ops/resize.h); Run walks output rows (all dims but the last) in
// parallel. Leading axes left alone (N and C of NCHW) only pick a plane; a row
// combines the taps of the other outer axes (at most kMaxCombos products, e.g.
// 2 source rows for bilinear) and applies the last axis's taps along the row.
// Nearest resizes (every axis one weight-1 tap) are a pure gather and work for
// any dtype; linear and cubic take float32 / float64.
#include <algorithm>
#include <cstring>
#include <memory>

#include "backends/cpu/game_util.h"
#include "ops/resize.h"

namespace kaiwu {
namespace cpu {
namespace {

constexpr int kMaxCombos = 64;

class ResizeKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    params_ = ctx.SharedParams<ResizeParams>();
    dtype_ = ctx.in(0).dtype;
    extrapolation_ = params_->extrapolation;
    const Shape& out = ctx.outputs[0].shape;
    const int r = static_cast<int>(out.size());

    const std::vector<AxisTaps>& axes = params_->axes;
    gather_ = true;
    int combos = 1;
    for (int d = 0; d < r; ++d) {
      gather_ &= axes[d].identity_weights();
      if (d < r - 1) combos *= axes[d].taps;
    }
    if (combos > kMaxCombos)
      ctx.Error("resizing this many axes with ", axes.back().taps, " taps each is not supported");
    const Shape& xs = ctx.in(0).shape;
    out_ = out;
    inner_ = out[r - 1];
    rows_ = inner_ == 0 ? 0 : NumElements(out) / inner_;
    lead_ = 0;
    while (lead_ < r - 1 && axes[lead_].identity) ++lead_;
    plane_in_ = NumElements(Shape(xs.begin() + lead_, xs.end()));
    plane_rows_ = NumElements(Shape(out.begin() + lead_, out.end() - 1));
    cost_ = static_cast<double>(inner_) * combos * axes.back().taps + 8.0 * r;
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
      int64_t coord[kMaxResizeRank] = {0};  // of axes lead_ .. outer - 1
      int64_t plane = r0 / plane_rows_, rem = r0 % plane_rows_;
      for (int d = outer - 1; d >= lead_; --d) {
        coord[d] = rem % out_[d];
        rem /= out_[d];
      }
      int64_t off[kMaxCombos];
      float w[kMaxCombos];
      const std::vector<AxisTaps>& axes = params_->axes;
      const AxisTaps& last = axes[outer];
      for (int64_t row = r0; row < r1; ++row) {
        T* yr = y + row * inner_;
        int n = 1;
        off[0] = plane * plane_in_;
        w[0] = 1.f;
        bool outside = false;
        for (int d = lead_; d < outer; ++d) {
          const AxisTaps& a = axes[d];
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
  std::shared_ptr<const ResizeParams> params_;  // the taps of every axis
  Shape out_;
  int64_t rows_ = 0, inner_ = 0;
  int lead_ = 0;                            // leading identity axes: a plane index
  int64_t plane_in_ = 0, plane_rows_ = 1;  // input elements and output rows per plane
  double cost_ = 1.0;
  bool gather_ = true;
};

}  // namespace

void RegisterGameResizeKernels(KernelRegistry& r) {
  // Nearest is a gather of any element; linear and cubic (float32 / float64
  // only, checked by shape inference) are weighted sums.
  r.Register(OpId::kResize,
             {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt8,
              DType::kUInt8, DType::kInt16, DType::kInt32, DType::kInt64, DType::kBool},
             &MakeKernel<ResizeKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
