// QuantizeLinear, DequantizeLinear (per tensor, per axis, blocked) and
// DynamicQuantizeLinear: elementwise, parallel over the outer dims.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/cpu/quant_gemm.h"
#include "backends/cpu/quant_kernels.h"

namespace kaiwu {
namespace cpu {
namespace {

template <typename Q>
inline Q QuantizeOne(float x, float scale, float zp, float lo, float hi) {
  return static_cast<Q>(static_cast<int32_t>(QuantizeValue(x / scale, zp, lo, hi)));
}

// Walks [outer, axis_len, inner] calling fn(begin, end, scale_index_of_begin,
// scale_step) over runs of elements that share one scale (per tensor / per
// axis) or walk the scales with the elements (blocked: step 1 over inner).
template <typename Fn>
void ForEachRun(const QuantAxisParams& p, ThreadPool* pool, Fn fn) {
  using Mode = QuantAxisParams::Mode;
  if (p.mode == Mode::kPerTensor) {
    pool->ParallelFor(p.outer, 1.0, [&](int64_t b, int64_t e) { fn(b, e, 0, 0); });
    return;
  }
  const int64_t nb = (p.axis_len + p.block - 1) / p.block;
  pool->ParallelFor(p.outer * p.axis_len, static_cast<double>(p.inner), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t o = r / p.axis_len, a = r % p.axis_len;
      if (p.mode == Mode::kPerAxis) fn(r * p.inner, (r + 1) * p.inner, a, 0);
      else fn(r * p.inner, (r + 1) * p.inner, (o * nb + a / p.block) * p.inner, 1);
    }
  });
}

template <typename Q>
Q ZeroPointAt(const void* zp, int64_t i) {
  return zp ? static_cast<const Q*>(zp)[i] : Q(0);
}

class QuantizeKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    p_ = ctx.Params<QuantAxisParams>();
    QuantRange(p_.quant_dtype, &lo_, &hi_);
  }
  void Run(const KernelIO& io) const override {
    switch (p_.quant_dtype) {
      case DType::kInt8: RunTyped<int8_t>(io); break;
      case DType::kInt16: RunTyped<int16_t>(io); break;
      default: RunTyped<uint8_t>(io); break;
    }
  }

 private:
  template <typename Q>
  void RunTyped(const KernelIO& io) const {
    const float* x = static_cast<const float*>(io.inputs[0]);
    const float* s = static_cast<const float*>(io.inputs[1]);
    const void* z = p_.has_zero_point ? io.inputs[2] : nullptr;
    Q* y = static_cast<Q*>(io.outputs[0]);
    ForEachRun(p_, io.pool, [&](int64_t b, int64_t e, int64_t si, int64_t step) {
      // Everything the loop reads in locals of the lambda: byte stores through
      // y could alias members and captures, which keeps the loop scalar.
      const float lo = lo_, hi = hi_;
      if (step == 0) {
        const float sc = s[si], zp = static_cast<float>(ZeroPointAt<Q>(z, si));
        const float* xs = x;
        Q* ys = y;
        if (sizeof(Q) == 1 && QGemmIsa() != QIsa::kScalar) {
          QuantizeBytesAvx2(xs + b, e - b, sc, /*divide=*/true, zp, lo, hi, std::is_signed<Q>::value,
                            reinterpret_cast<uint8_t*>(ys + b));
          return;
        }
        for (int64_t i = b; i < e; ++i) ys[i] = QuantizeOne<Q>(xs[i], sc, zp, lo, hi);
      } else {
        for (int64_t i = b, j = si; i < e; ++i, ++j)
          y[i] = QuantizeOne<Q>(x[i], s[j], static_cast<float>(ZeroPointAt<Q>(z, j)), lo, hi);
      }
    });
  }
  QuantAxisParams p_;
  float lo_ = 0.f, hi_ = 255.f;
};

class DequantizeKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override { p_ = ctx.Params<QuantAxisParams>(); }
  void Run(const KernelIO& io) const override {
    switch (p_.quant_dtype) {
      case DType::kInt8: RunTyped<int8_t>(io); break;
      case DType::kInt16: RunTyped<int16_t>(io); break;
      case DType::kInt32: RunTyped<int32_t>(io); break;
      default: RunTyped<uint8_t>(io); break;
    }
  }

 private:
  template <typename Q>
  void RunTyped(const KernelIO& io) const {
    const Q* x = static_cast<const Q*>(io.inputs[0]);
    const float* s = static_cast<const float*>(io.inputs[1]);
    const void* z = p_.has_zero_point ? io.inputs[2] : nullptr;
    float* y = static_cast<float*>(io.outputs[0]);
    ForEachRun(p_, io.pool, [&](int64_t b, int64_t e, int64_t si, int64_t step) {
      if (step == 0) {
        const float sc = s[si];
        const int32_t zp = static_cast<int32_t>(ZeroPointAt<Q>(z, si));
        for (int64_t i = b; i < e; ++i)
          y[i] = static_cast<float>(static_cast<int32_t>(x[i]) - zp) * sc;
      } else {
        for (int64_t i = b, j = si; i < e; ++i, ++j)
          y[i] = static_cast<float>(static_cast<int32_t>(x[i]) -
                                    static_cast<int32_t>(ZeroPointAt<Q>(z, j))) * s[j];
      }
    });
  }
  QuantAxisParams p_;
};

// DynamicQuantizeLinear, as onnxruntime computes it: range [min(0, min x),
// max(0, max x)], scale = range / 255 (1 when the range is empty), zero point
// = round(saturate(0 - min / scale)).
class DynamicQuantizeKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override { size_ = ctx.in(0).size(); }
  void Run(const KernelIO& io) const override {
    const float* x = static_cast<const float*>(io.inputs[0]);
    float lo = 0.f, hi = 0.f;
    for (int64_t i = 0; i < size_; ++i) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
    const float scale = hi == lo ? 1.f : (hi - lo) / 255.f;
    const float zp_f = RoundHalfEven(std::max(0.f, std::min(255.f, 0.f - lo / scale)));
    uint8_t* y = static_cast<uint8_t*>(io.outputs[0]);
    *static_cast<float*>(io.outputs[1]) = scale;
    *static_cast<uint8_t*>(io.outputs[2]) = static_cast<uint8_t>(zp_f);
    io.pool->ParallelFor(size_, 1.0, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = QuantizeOne<uint8_t>(x[i], scale, zp_f, 0.f, 255.f);
    });
  }

 private:
  int64_t size_ = 0;
};

}  // namespace

void RegisterQuantLinearKernels(KernelRegistry& r) {
  r.Register(OpId::kQuantizeLinear, {DType::kFloat32}, &MakeKernel<QuantizeKernel>);
  r.Register(OpId::kDequantizeLinear, {DType::kInt8, DType::kUInt8, DType::kInt16, DType::kInt32},
             &MakeKernel<DequantizeKernel>);
  r.Register(OpId::kDynamicQuantizeLinear, {DType::kFloat32}, &MakeKernel<DynamicQuantizeKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
