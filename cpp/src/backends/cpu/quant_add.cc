// kaiwu QLinearAdd (passes/fuse_qdq_add.cc): y = Q(DQ(a) + DQ(b)), per tensor,
// numpy broadcasting. Per run of output elements, 256 at a time: DQ(a) and
// DQ(b) into two float blocks, their sum, then the quantization. These are
// the operations of the DequantizeLinear, Add and QuantizeLinear kernels in
// the same order, kept apart (the build compiles this file with
// -ffp-contract=off, so no multiply-add is fused), so the bytes are theirs;
// the quantization divides only where a multiply by 1 / y_scale could round
// differently (QuantizeDividedBytes).
#include <algorithm>
#include <type_traits>

#include "backends/cpu/elementwise_util.h"
#include "backends/cpu/quant_gemm.h"
#include "backends/cpu/quant_kernels.h"

namespace kaiwu {
namespace cpu {
namespace {

// out[i] = (x[i * stride] - zp) * s for i < n (stride 0 or 1), as DequantizeLinear.
template <typename T>
void Dequantize(const T* x, int64_t stride, int64_t n, int32_t zp, float s, float* out) {
  if (stride == 0) {
    std::fill(out, out + n, static_cast<float>(static_cast<int32_t>(*x) - zp) * s);
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<int32_t>(x[i]) - zp) * s;
}

class QLinearAddKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    plan_ = MakeBroadcastPlan(ctx, {ctx.in(0).shape, ctx.in(3).shape}, ctx.outputs[0].shape);
    a_dt_ = ctx.in(0).dtype;
    b_dt_ = ctx.in(3).dtype;
    y_dt_ = ctx.outputs[0].dtype;
    has_zp_[0] = ctx.HasInput(2);
    has_zp_[1] = ctx.HasInput(5);
    has_zp_[2] = ctx.HasInput(7);
    QuantRange(y_dt_, &lo_, &hi_);
  }

  void Run(const KernelIO& io) const override {
    if (a_dt_ == DType::kUInt8) {
      if (b_dt_ == DType::kUInt8) RunTyped<uint8_t, uint8_t>(io);
      else RunTyped<uint8_t, int8_t>(io);
    } else {
      if (b_dt_ == DType::kUInt8) RunTyped<int8_t, uint8_t>(io);
      else RunTyped<int8_t, int8_t>(io);
    }
  }

 private:
  template <typename A, typename B>
  void RunTyped(const KernelIO& io) const {
    const A* a = static_cast<const A*>(io.inputs[0]);
    const B* b = static_cast<const B*>(io.inputs[3]);
    uint8_t* y = static_cast<uint8_t*>(io.outputs[0]);
    const float sa = *static_cast<const float*>(io.inputs[1]), sb = *static_cast<const float*>(io.inputs[4]);
    const float sy = *static_cast<const float*>(io.inputs[6]);
    const int32_t za = has_zp_[0] ? ZeroPoint(io.inputs[2], a_dt_, false, 0) : 0;
    const int32_t zb = has_zp_[1] ? ZeroPoint(io.inputs[5], b_dt_, false, 0) : 0;
    const float zy = static_cast<float>(has_zp_[2] ? ZeroPoint(io.inputs[7], y_dt_, false, 0) : 0);
    const float lo = lo_, hi = hi_;
    const bool is_signed = y_dt_ == DType::kInt8, vector = QGemmIsa() != QIsa::kScalar;
    const int64_t ia = plan_.inner_stride(0), ib = plan_.inner_stride(1);
    ParallelElements(io.pool, plan_.total, 2.0, [&](int64_t begin, int64_t end) {
      alignas(64) float fa[256], fb[256];
      ForEachRun<2>(plan_, begin, end, [&](int64_t o, const int64_t* off, int64_t n) {
        for (int64_t i = 0; i < n; i += 256) {
          const int64_t m = std::min<int64_t>(256, n - i);
          Dequantize(a + off[0] + i * ia, ia, m, za, sa, fa);
          Dequantize(b + off[1] + i * ib, ib, m, zb, sb, fb);
          for (int64_t j = 0; j < m; ++j) fa[j] = fa[j] + fb[j];
          uint8_t* out = y + o + i;
          if (vector) {
            QuantizeDividedBytes(fa, m, sy, zy, lo, hi, is_signed, out);
          } else {
            for (int64_t j = 0; j < m; ++j)
              out[j] = static_cast<uint8_t>(static_cast<int32_t>(QuantizeValue(fa[j] / sy, zy, lo, hi)));
          }
        }
      });
    });
  }

  BroadcastPlan plan_;
  DType a_dt_ = DType::kUInt8, b_dt_ = DType::kUInt8, y_dt_ = DType::kUInt8;
  bool has_zp_[3] = {false, false, false};
  float lo_ = 0.f, hi_ = 255.f;
};

}  // namespace

void RegisterQuantAddKernel(KernelRegistry& r) {
  r.Register(OpId::kQLinearAdd, {DType::kUInt8, DType::kInt8}, &MakeKernel<QLinearAddKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
