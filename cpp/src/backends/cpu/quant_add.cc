// kaiwu QLinearAdd (passes/fuse_qdq_add.cc): y = Q(DQ(a) + DQ(b)), per tensor,
// numpy broadcasting. Per run of output elements, 256 at a time: DQ(a) and
// DQ(b) into two float blocks, their sum, then the quantization. These are
// the operations of the DequantizeLinear, Add and QuantizeLinear kernels in
// the same order, kept apart (the build compiles this file with
// -ffp-contract=off, so no multiply-add is fused), so the bytes are theirs;
// the quantization divides only where a multiply by 1 / y_scale could round
// differently (QuantizeDividedBytes).
#include <algorithm>

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

// Up to 256 outputs: y[i] = Q_z(DQ_a(a[i * ia]) + DQ_b(b[i * ib])) (strides 0 or 1).
// y may be a (each block is read whole before it is written).
template <typename A, typename B>
void AddBlock(const QAddParams& p, const A* a, int64_t ia, const B* b, int64_t ib, int64_t m, uint8_t* y) {
  alignas(64) float fa[256], fb[256];
  Dequantize(a, ia, m, p.za, p.sa, fa);
  Dequantize(b, ib, m, p.zb, p.sb, fb);
  for (int64_t j = 0; j < m; ++j) fa[j] = fa[j] + fb[j];
  if (QGemmIsa() != QIsa::kScalar) {
    QuantizeDividedBytes(fa, m, p.sz, p.zz, p.lo, p.hi, p.z_signed, y);
    return;
  }
  for (int64_t j = 0; j < m; ++j)
    y[j] = static_cast<uint8_t>(static_cast<int32_t>(QuantizeValue(fa[j] / p.sz, p.zz, p.lo, p.hi)));
}

template <typename A, typename B>
void AddRun(const QAddParams& p, const A* a, int64_t ia, const B* b, int64_t ib, int64_t n, uint8_t* y) {
  for (int64_t i = 0; i < n; i += 256) AddBlock(p, a + i * ia, ia, b + i * ib, ib, std::min<int64_t>(256, n - i), y + i);
}

// AddRun over raw bytes read as A (int8 when a_signed) and B.
void AddRunBytes(const QAddParams& p, const uint8_t* a, int64_t ia, const uint8_t* b, int64_t ib, int64_t n,
                 uint8_t* y) {
  const auto* as = reinterpret_cast<const int8_t*>(a);
  const auto* bs = reinterpret_cast<const int8_t*>(b);
  if (p.a_signed) {
    if (p.b_signed) AddRun(p, as, ia, bs, ib, n, y);
    else AddRun(p, as, ia, b, ib, n, y);
  } else {
    if (p.b_signed) AddRun(p, a, ia, bs, ib, n, y);
    else AddRun(p, a, ia, b, ib, n, y);
  }
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
  }

  void Run(const KernelIO& io) const override {
    const QAddParams p = MakeQAddParams(io.inputs[1], has_zp_[0] ? io.inputs[2] : nullptr, a_dt_, io.inputs[4],
                                        has_zp_[1] ? io.inputs[5] : nullptr, b_dt_, io.inputs[6],
                                        has_zp_[2] ? io.inputs[7] : nullptr, y_dt_);
    const uint8_t* a = static_cast<const uint8_t*>(io.inputs[0]);
    const uint8_t* b = static_cast<const uint8_t*>(io.inputs[3]);
    uint8_t* y = static_cast<uint8_t*>(io.outputs[0]);
    const int64_t ia = plan_.inner_stride(0), ib = plan_.inner_stride(1);
    ParallelElements(io.pool, plan_.total, 2.0, [&](int64_t begin, int64_t end) {
      ForEachRun<2>(plan_, begin, end, [&](int64_t o, const int64_t* off, int64_t n) {
        AddRunBytes(p, a + off[0], ia, b + off[1], ib, n, y + o);
      });
    });
  }

 private:
  BroadcastPlan plan_;
  DType a_dt_ = DType::kUInt8, b_dt_ = DType::kUInt8, y_dt_ = DType::kUInt8;
  bool has_zp_[3] = {false, false, false};
};

}  // namespace

QAddParams MakeQAddParams(const void* sa, const void* za, DType a, const void* sb, const void* zb, DType b,
                          const void* sz, const void* zz, DType z) {
  QAddParams p;
  p.sa = *static_cast<const float*>(sa);
  p.sb = *static_cast<const float*>(sb);
  p.sz = *static_cast<const float*>(sz);
  p.za = za ? ZeroPoint(za, a, false, 0) : 0;
  p.zb = zb ? ZeroPoint(zb, b, false, 0) : 0;
  p.zz = static_cast<float>(zz ? ZeroPoint(zz, z, false, 0) : 0);
  QuantRange(z, &p.lo, &p.hi);
  p.a_signed = a == DType::kInt8;
  p.b_signed = b == DType::kInt8;
  p.z_signed = z == DType::kInt8;
  return p;
}

void QAddBytes(const QAddParams& p, const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* y) {
  AddRunBytes(p, a, 1, b, 1, n, y);
}

void RegisterQuantAddKernel(KernelRegistry& r) {
  r.Register(OpId::kQLinearAdd, {DType::kUInt8, DType::kInt8}, &MakeKernel<QLinearAddKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
