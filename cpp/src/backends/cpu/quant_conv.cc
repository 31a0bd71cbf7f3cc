// ConvInteger and QLinearConv (reference kernels): per image and group, an
// im2col of x - x_zero_point (the padding reads 0 after the shift) into int32,
// then an int32-accumulating GEMM with w - w_zero_point; QLinearConv adds the
// int32 bias and requantizes with x_scale * w_scale / y_scale.
#include "backends/cpu/quant_kernels.h"

namespace kaiwu {
namespace cpu {
namespace {

// col[(c * K + tap) * P + o] = x[c, in(o, tap)] - zp, or 0 in the padding.
template <typename X>
void Im2ColShifted(const SpatialGeometry& g, const X* x, int64_t channels, int32_t zp, int32_t* col) {
  const int64_t P = g.out_size(), K = g.kernel_size();
  for (int64_t c = 0; c < channels; ++c) {
    const X* xc = x + c * g.in_size();
    for (int64_t t = 0; t < K; ++t) {
      const int64_t kd = t / (g.kernel[1] * g.kernel[2]), kh = (t / g.kernel[2]) % g.kernel[1],
                    kw = t % g.kernel[2];
      int32_t* dst = col + (c * K + t) * P;
      for (int64_t od = 0; od < g.out[0]; ++od)
        for (int64_t oh = 0; oh < g.out[1]; ++oh)
          for (int64_t ow = 0; ow < g.out[2]; ++ow) {
            const int64_t id = od * g.stride[0] - g.pad_begin[0] + kd * g.dilation[0];
            const int64_t ih = oh * g.stride[1] - g.pad_begin[1] + kh * g.dilation[1];
            const int64_t iw = ow * g.stride[2] - g.pad_begin[2] + kw * g.dilation[2];
            const bool in = id >= 0 && id < g.in[0] && ih >= 0 && ih < g.in[1] && iw >= 0 && iw < g.in[2];
            *dst++ = in ? static_cast<int32_t>(xc[(id * g.in[1] + ih) * g.in[2] + iw]) - zp : 0;
          }
    }
  }
}

template <bool kLinear>
class QConvKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    p_ = ctx.Params<QConvParams>();
    cg_ = p_.c / p_.group;
    mg_ = p_.m / p_.group;
    kc_ = cg_ * p_.geo.kernel_size();
    P_ = p_.geo.out_size();
    wzp_per_ = p_.has_w_zp && ctx.in(kWZ).size() > 1;
    ws_per_ = kLinear && ctx.in(4).size() > 1;
    const int64_t ints = kc_ * P_ + (kLinear ? mg_ * P_ : 0) + p_.m + P_;
    ctx.scratch_bytes = static_cast<size_t>(ints) * sizeof(int32_t);
  }

  void Run(const KernelIO& io) const override {
    if (p_.x_dtype == DType::kUInt8) RunX<uint8_t>(io);
    else RunX<int8_t>(io);
  }

 private:
  // Input indices: ConvInteger (x, w, x_zp, w_zp); QLinearConv (x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp, B).
  static constexpr int kW = kLinear ? 3 : 1, kXZ = 2, kWZ = kLinear ? 5 : 3;

  template <typename X>
  void RunX(const KernelIO& io) const {
    if (p_.w_dtype == DType::kUInt8) RunXW<X, uint8_t>(io);
    else RunXW<X, int8_t>(io);
  }

  template <typename X, typename W>
  void RunXW(const KernelIO& io) const {
    const X* x = static_cast<const X*>(io.inputs[0]);
    const W* w = static_cast<const W*>(io.inputs[kW]);
    int32_t* col = static_cast<int32_t*>(io.scratch);
    int32_t* acc = col + kc_ * P_;
    int32_t* wzp = acc + (kLinear ? mg_ * P_ : 0);
    int32_t* zeros = wzp + p_.m;
    std::fill(zeros, zeros + P_, 0);
    const int32_t xzp = ZeroPoint(p_.has_x_zp ? io.inputs[kXZ] : nullptr, p_.x_dtype, false, 0);
    for (int64_t m = 0; m < p_.m; ++m)
      wzp[m] = ZeroPoint(p_.has_w_zp ? io.inputs[kWZ] : nullptr, p_.w_dtype, wzp_per_, m);
    const int64_t in_img = p_.c * p_.geo.in_size();
    for (int64_t n = 0; n < p_.n; ++n)
      for (int64_t g = 0; g < p_.group; ++g) {
        Im2ColShifted(p_.geo, x + n * in_img + g * cg_ * p_.geo.in_size(), cg_, xzp, col);
        const int64_t m0 = g * mg_;
        int32_t* out = kLinear ? acc : static_cast<int32_t*>(io.outputs[0]) + (n * p_.m + m0) * P_;
        io.pool->ParallelFor(mg_, 2.0 * kc_ * P_, [&](int64_t r0, int64_t r1) {
          IntGemmRef(r1 - r0, P_, kc_, w + (m0 + r0) * kc_, kc_, wzp + m0 + r0, col, P_, zeros,
                     out + r0 * P_);
        });
        if (kLinear) {
          if (p_.y_dtype == DType::kUInt8) Store<uint8_t>(io, acc, n, m0);
          else Store<int8_t>(io, acc, n, m0);
        }
      }
  }

  template <typename Y>
  void Store(const KernelIO& io, const int32_t* acc, int64_t n, int64_t m0) const {
    const float xs = *static_cast<const float*>(io.inputs[1]);
    const float* ws = static_cast<const float*>(io.inputs[4]);
    const float ys = *static_cast<const float*>(io.inputs[6]);
    const int32_t yzp = ZeroPoint(io.inputs[7], p_.y_dtype, false, 0);
    const int32_t* bias = p_.has_bias ? static_cast<const int32_t*>(io.inputs[8]) : nullptr;
    Y* y = static_cast<Y*>(io.outputs[0]) + (n * p_.m + m0) * P_;
    for (int64_t m = 0; m < mg_; ++m) {
      const float mult = xs * ws[ws_per_ ? m0 + m : 0] / ys;
      const int32_t b = bias ? bias[m0 + m] : 0;
      for (int64_t o = 0; o < P_; ++o) y[m * P_ + o] = Requantize<Y>(acc[m * P_ + o] + b, mult, yzp);
    }
  }

  QConvParams p_;
  // w_scale and w_zero_point are each a scalar or per channel, independently.
  bool wzp_per_ = false, ws_per_ = false;
  int64_t cg_ = 0, mg_ = 0, kc_ = 0, P_ = 0;
};

}  // namespace

void RegisterQuantConvKernels(KernelRegistry& r) {
  r.Register(OpId::kConvInteger, {DType::kUInt8, DType::kInt8}, &MakeKernel<QConvKernel<false>>);
  r.Register(OpId::kQLinearConv, {DType::kUInt8, DType::kInt8}, &MakeKernel<QConvKernel<true>>);
}

}  // namespace cpu
}  // namespace kaiwu
