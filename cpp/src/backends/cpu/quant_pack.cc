// kaiwu QPackWeights: the packed operand of QLinearFused (layout:
// ops/quant.h QPackedLayout) from the int8 weight, its scales and zero points,
// the input's and the output's quantization and the float bias. A static node:
// the session evaluates it at load and after each refit that changes any input.
#include <algorithm>
#include <cstring>

#include "backends/cpu/quant_kernels.h"

namespace kaiwu {
namespace cpu {
namespace {

class QPackKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    p_ = ctx.Params<QPackParams>();
    // gemm_layout: a channels-last conv on the CPU, whose product has pixels
    // as rows like a Gemm's (passes/layout_nhwc.h).
    conv_ = ctx.node.GetInt("conv", 0) != 0 && ctx.node.GetInt("gemm_layout", 0) == 0;
    has_wzp_ = ctx.HasInput(2);
    has_xzp_ = ctx.HasInput(4);
    has_yzp_ = ctx.HasInput(7);
    ctx.scratch_bytes = static_cast<size_t>(QPackedLayout(p_.k_packed, p_.n).kp);  // one channel in packed k order
  }

  void Run(const KernelIO& io) const override {
    const QPackedLayout L(p_.k_packed, p_.n);
    uint8_t* out = static_cast<uint8_t*>(io.outputs[0]);
    std::memset(out, 0, static_cast<size_t>(L.bytes()));
    const int8_t* w = static_cast<const int8_t*>(io.inputs[0]);
    const float* ws = static_cast<const float*>(io.inputs[1]);
    const int8_t* wz = has_wzp_ ? static_cast<const int8_t*>(io.inputs[2]) : nullptr;
    const float xs = *static_cast<const float*>(io.inputs[3]);
    int32_t xz = has_xzp_ ? ZeroPoint(io.inputs[4], p_.x_dtype, false, 0) : 0;
    if (p_.x_dtype == DType::kInt8) xz += 128;  // the kernel reads int8 x as x + 128
    const float* bias = p_.has_bias ? static_cast<const float*>(io.inputs[5]) : nullptr;
    const float ys = p_.has_y ? *static_cast<const float*>(io.inputs[6]) : 1.f;
    const int32_t yz = has_yzp_ ? ZeroPoint(io.inputs[7], p_.y_dtype, false, 0) : 0;

    int8_t* wp = reinterpret_cast<int8_t*>(out + L.weights());
    int32_t* corr = reinterpret_cast<int32_t*>(out + L.corr());
    float* mult = reinterpret_cast<float*>(out + L.mult());
    float* fb = reinterpret_cast<float*>(out + L.bias());
    int32_t* wzp = reinterpret_cast<int32_t*>(out + L.wzp());
    int32_t* wsum = reinterpret_cast<int32_t*>(out + L.wsum());
    int32_t any_wzp = 0, pairs_fit = 1, no_min = 1;
    const int64_t row_from = p_.n - L.dot_tail();  // Gemm: channels stored as rows from here
    // Channel c's weights in packed k order (kernel rows padded to row_bytes).
    const int64_t run = p_.k / p_.k_rows, row_bytes = p_.row_bytes ? p_.row_bytes : run;
    int8_t* row = static_cast<int8_t*>(io.scratch);
    for (int64_t c = 0; c < p_.n; ++c) {
      const int64_t si = p_.w_per_channel ? c : 0;
      const int32_t z = wz ? wz[si] : 0;
      int32_t sum = 0;
      std::fill(row, row + L.kp, int8_t{0});
      for (int64_t k = 0; k < p_.k; ++k) {
        const int8_t v = p_.trans ? w[c * p_.k + k] : w[k * p_.n + c];
        sum += v;
        no_min &= v != -128;
        row[(k / run) * row_bytes + k % run] = v;
      }
      for (int64_t k = 0; k < L.kp; ++k) {
        const int8_t v = row[k];
        if (conv_) wp[c * L.kp + k] = v;
        else if (c >= row_from) wp[(c / 16) * L.kp * 16 + (c % 16) * L.kp + k] = v;
        else wp[(c / 16) * L.kp * 16 + (k / 4) * 64 + (c % 16) * 4 + k % 4] = v;
      }
      // The pairs that vpmaddubsw sums: consecutive packed k.
      for (int64_t k = 0; k < L.kp; k += 2) {
        const int v0 = row[k], v1 = row[k + 1];
        pairs_fit &= (v0 < 0 ? -v0 : v0) + (v1 < 0 ? -v1 : v1) <= 128;
      }
      corr[c] = -xz * sum + static_cast<int32_t>(p_.k) * xz * z;
      mult[c] = xs * ws[si];
      fb[c] = bias ? bias[c] : 0.f;
      wzp[c] = z;
      wsum[c] = sum;
      any_wzp |= z != 0;
    }
    int32_t header[8];
    const float inv = 1.f / ys;
    header[0] = any_wzp;
    header[1] = xz;
    std::memcpy(&header[2], &inv, 4);
    header[3] = yz;
    header[4] = pairs_fit;
    header[5] = no_min;
    header[6] = conv_ ? 0 : 1;  // weights in the Gemm blocks
    header[7] = static_cast<int32_t>(p_.row_bytes);
    std::memcpy(out, header, sizeof(header));
  }

 private:
  QPackParams p_;
  bool conv_ = false, has_wzp_ = false, has_xzp_ = false, has_yzp_ = false;
};

}  // namespace

void RegisterQuantPackKernel(KernelRegistry& r) {
  r.Register(OpId::kQPackWeights, {DType::kInt8}, &MakeKernel<QPackKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
