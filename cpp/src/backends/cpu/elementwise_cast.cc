// Cast (target from the `to` attribute, an ONNX TensorProto code) and CastLike
// (target dtype of input 1) between float16/32/64, bfloat16, int8/16/32/64,
// uint8 and bool, as numpy casts. The 16-bit floats round to nearest even
// (overflow to infinity, NaN stays NaN); float32 <-> float16/bfloat16 is the
// bulk path of core/half_convert.h, which the static weight program of a
// half-precision session runs at load and refit.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backends/cpu/elementwise_util.h"
#include "core/half.h"
#include "core/half_convert.h"

namespace kaiwu {
namespace cpu {

namespace {

// One element: float -> integer truncates toward zero (through int32 for the
// narrow types, so out-of-range values wrap as in numpy); anything -> bool is
// "non-zero"; bool -> anything is 0 or 1.
template <typename S, typename D>
inline D Convert(S x) {
  if constexpr (std::is_same_v<D, bool>) {
    return x != S(0);
  } else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D> &&
                       sizeof(D) < sizeof(int32_t)) {
    return static_cast<D>(static_cast<int32_t>(x));
  } else {
    return static_cast<D>(x);
  }
}

// The 16-bit floats' storage, as distinct types.
struct F16 {
  uint16_t bits;
};
struct BF16 {
  uint16_t bits;
};
template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, F16> || std::is_same_v<T, BF16>;

template <typename H>
inline float Widen(H x) {
  if constexpr (std::is_same_v<H, F16>) {
    return HalfToFloat(x.bits);
  } else {
    return BFloat16ToFloat(x.bits);
  }
}

template <typename H>
inline H Narrow(float f) {
  if constexpr (std::is_same_v<H, F16>) {
    return H{FloatToHalf(f)};
  } else {
    return H{FloatToBFloat16(f)};
  }
}

// double -> 16-bit float with one rounding: double -> float rounding to odd
// (truncate, then set the last bit when inexact) keeps enough bits that the
// float -> half rounding to nearest even is that of the exact value.
template <typename H>
inline H NarrowDouble(double d) {
  float f = static_cast<float>(d);
  if (static_cast<double>(f) != d && !std::isnan(d)) {
    uint32_t b = FloatBits(f);
    if (std::fabs(static_cast<double>(f)) > std::fabs(d)) --b;  // toward zero
    f = BitsFloat(b | 1u);
  }
  return Narrow<H>(f);
}

// Any element type (F16/BF16 included) -> D.
template <typename S, typename D>
inline D ConvertAny(S x) {
  if constexpr (kIsHalf<S>) {
    const float f = Widen(x);
    if constexpr (kIsHalf<D>) {
      return Narrow<D>(f);
    } else {
      return Convert<float, D>(f);
    }
  } else if constexpr (kIsHalf<D>) {
    if constexpr (std::is_same_v<S, float>) {
      return Narrow<D>(x);
    } else {
      return NarrowDouble<D>(static_cast<double>(x));  // integers: exact up to 2^53
    }
  } else {
    return Convert<S, D>(x);
  }
}

// float32 <-> 16-bit float in bulk; false for other pairs.
template <typename S, typename D>
bool BulkHalf(const S* x, D* y, int64_t n, ThreadPool* pool) {
  constexpr bool kToHalf = std::is_same_v<S, float> && kIsHalf<D>;
  constexpr bool kFromHalf = kIsHalf<S> && std::is_same_v<D, float>;
  if constexpr (kToHalf || kFromHalf) {
    ParallelElements(pool, n, 0.5, [&](int64_t s, int64_t e) {
      if constexpr (std::is_same_v<D, F16>) {
        FloatToHalfN(x + s, reinterpret_cast<uint16_t*>(y + s), e - s);
      } else if constexpr (std::is_same_v<D, BF16>) {
        FloatToBFloat16N(x + s, reinterpret_cast<uint16_t*>(y + s), e - s);
      } else if constexpr (std::is_same_v<S, F16>) {
        HalfToFloatN(reinterpret_cast<const uint16_t*>(x + s), y + s, e - s);
      } else {
        BFloat16ToFloatN(reinterpret_cast<const uint16_t*>(x + s), y + s, e - s);
      }
    });
    return true;
  }
  return false;
}

template <typename S, typename D>
void CastLoop(const void* in, void* out, int64_t n, ThreadPool* pool) {
  const S* x = static_cast<const S*>(in);
  D* y = static_cast<D*>(out);
  if constexpr (std::is_same_v<S, D>) {
    if (static_cast<const void*>(x) != static_cast<void*>(y)) std::memcpy(y, x, sizeof(S) * n);
  } else if constexpr (std::is_same_v<S, bool>) {
    // Read bools as bytes so the loop vectorises.
    const uint8_t* b = static_cast<const uint8_t*>(in);
    ParallelElements(pool, n, 1.0, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) {
        if constexpr (kIsHalf<D>) {
          y[i] = Narrow<D>(static_cast<float>(b[i]));
        } else {
          y[i] = static_cast<D>(b[i]);
        }
      }
    });
  } else {
    if (BulkHalf(x, y, n, pool)) return;
    ParallelElements(pool, n, 1.0, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) y[i] = ConvertAny<S, D>(x[i]);
    });
  }
}

// Calls BODY with `using T` the storage type of every dtype Cast takes.
#define KAIWU_DISPATCH_CAST(dtype, ...)                 \
  switch (dtype) {                                      \
    KAIWU_DISPATCH_CASE(kFloat16, F16, __VA_ARGS__)     \
    KAIWU_DISPATCH_CASE(kBFloat16, BF16, __VA_ARGS__)   \
    default: KAIWU_DISPATCH_ALL(dtype, __VA_ARGS__);    \
  }

template <typename S>
void CastFrom(DType to, const void* in, void* out, int64_t n, ThreadPool* pool) {
  KAIWU_DISPATCH_CAST(to, CastLoop<S, T>(in, out, n, pool));
}

class CastKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    from_ = ctx.in(0).dtype;
    to_ = ctx.outputs[0].dtype;
    size_ = ctx.in(0).size();
  }

  void Run(const KernelIO& io) const override {
    const void* in = io.inputs[0];
    void* out = io.outputs[0];
    KAIWU_DISPATCH_CAST(from_, CastFrom<T>(to_, in, out, size_, io.pool));
  }

 private:
  DType from_ = DType::kUndefined, to_ = DType::kUndefined;
  int64_t size_ = 0;
};

}  // namespace

void RegisterCastKernels(KernelRegistry& r) {
  const std::initializer_list<DType> all = {DType::kFloat32, DType::kFloat64, DType::kInt8,
                                            DType::kUInt8,   DType::kInt16,   DType::kInt32,
                                            DType::kInt64,   DType::kBool,    DType::kFloat16,
                                            DType::kBFloat16};
  r.Register(OpId::kCast, all, &MakeKernel<CastKernel>);
  r.Register(OpId::kCastLike, all, &MakeKernel<CastKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
