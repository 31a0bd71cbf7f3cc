// kaiwu QLinearAdd (passes/fuse_qdq_add.cc): y = Q(DQ(a) + DQ(b)), per tensor,
// numpy broadcasting. Per run of output elements, 256 at a time: DQ(a) and
// DQ(b) into two float blocks, their sum, then the quantization. These are
// the operations of the DequantizeLinear, Add and QuantizeLinear kernels in
// the same order, kept apart (the build compiles this file with
// -ffp-contract=off, so no multiply-add is fused), so the bytes are theirs;
// the quantization divides only where a multiply by 1 / y_scale could round
// differently (QuantizeDividedBytes).
#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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
        if (ia == 1 && ib == 1) QAddBytes(p, a + off[0], b + off[1], n, y + o);
        else AddRunBytes(p, a + off[0], ia, b + off[1], ib, n, y + o);
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
  int64_t i = 0;
#if defined(__AVX512F__) || defined(__AVX2__)
  // The build's widest vectors, one pass from the bytes to the bytes: int8
  // operands read as uint8 (x ^ 0x80) against a zero point moved by 128, both
  // dequantized products kept apart before the sum (-ffp-contract=off), then
  // QuantizeDividedBytes' steps.
#if defined(__AVX512F__)
  constexpr int L = 16;
#else
  constexpr int L = 8;
#endif
  using FV = float __attribute__((vector_size(4 * L)));
  using IV = int32_t __attribute__((vector_size(4 * L)));
  using UV = uint8_t __attribute__((vector_size(L)));
  using BV = uint8_t __attribute__((vector_size(4 * L)));
  auto widen = [](const uint8_t* src, uint8_t flip) {
    IV v;
#if defined(__AVX512F__)
    v = reinterpret_cast<IV>(
        _mm512_cvtepu8_epi32(_mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)), _mm_set1_epi8(flip))));
#else
    v = reinterpret_cast<IV>(_mm256_cvtepu8_epi32(
        _mm_xor_si128(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src)), _mm_set1_epi8(flip))));
#endif
    return v;
  };
  const uint8_t fa = p.a_signed ? 0x80 : 0, fb = p.b_signed ? 0x80 : 0;
  const IV za = IV{} + (p.za + (p.a_signed ? 128 : 0)), zb = IV{} + (p.zb + (p.b_signed ? 128 : 0));
  const FV sa = FV{} + p.sa, sb = FV{} + p.sb, sz = FV{} + p.sz, inv = FV{} + 1.f / p.sz;
  const FV magic = FV{} + 12582912.f, tie = FV{} + (0.5f - 1.f / 512.f), small = FV{} + 4096.f;
  const FV big = FV{} + 4194304.f, nbig = FV{} - 4194304.f, zz = FV{} + p.zz, lo = FV{} + p.lo, hi = FV{} + p.hi;
  for (; i + L <= n; i += L) {
    const FV da = __builtin_convertvector(widen(a + i, fa) - za, FV) * sa;
    const FV db = __builtin_convertvector(widen(b + i, fb) - zb, FV) * sb;
    const FV f = da + db;
    FV v = f * inv;
    const FV r = (v + magic) - magic;
    const FV d = v > r ? v - r : r - v, av = v > 0.f ? v : -v;
    const IV risky = (d > tie) & (av < small);
#if defined(__AVX512F__)
    const bool divide = _mm512_test_epi32_mask(reinterpret_cast<__m512i>(risky), reinterpret_cast<__m512i>(risky)) != 0;
#else
    const bool divide = _mm256_movemask_ps(reinterpret_cast<__m256>(risky)) != 0;
#endif
    if (divide) v = f / sz;
    v = v > nbig ? v : nbig;  // NaN -> -2^22
    v = v < big ? v : big;
    v = (v + magic) - magic;  // round half to even
    v = v + zz;
    v = v > lo ? v : lo;
    v = v < hi ? v : hi;
    const IV q = __builtin_convertvector(v, IV);  // integers in [lo, hi]: exact
    BV bytes;
    std::memcpy(&bytes, &q, sizeof(q));
#if defined(__AVX512F__)
    const UV out = __builtin_shufflevector(bytes, bytes, 0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60);
#else
    const UV out = __builtin_shufflevector(bytes, bytes, 0, 4, 8, 12, 16, 20, 24, 28);
#endif
    std::memcpy(y + i, &out, L);
  }
#endif
  if (i < n) AddRunBytes(p, a + i, 1, b + i, 1, n - i, y + i);
}

void RegisterQuantAddKernel(KernelRegistry& r) {
  r.Register(OpId::kQLinearAdd, {DType::kUInt8, DType::kInt8}, &MakeKernel<QLinearAddKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
