// Cast and CastLike on CUDA between float16/32/64, bfloat16, int8/16/32/64,
// uint8 and bool, element for element what elementwise_cast.cc computes on an
// x86 CPU.
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backends/cuda/elementwise_util.cuh"
#include "backends/cuda/half_util.cuh"

namespace kaiwu {
namespace cuda {
namespace eltwise {
namespace {

template <DType D> struct StorageOf;
template <> struct StorageOf<DType::kFloat32> { using type = float; };
template <> struct StorageOf<DType::kFloat64> { using type = double; };
template <> struct StorageOf<DType::kFloat16> { using type = __half; };
template <> struct StorageOf<DType::kBFloat16> { using type = __nv_bfloat16; };
template <> struct StorageOf<DType::kInt8> { using type = int8_t; };
template <> struct StorageOf<DType::kUInt8> { using type = uint8_t; };
template <> struct StorageOf<DType::kInt16> { using type = int16_t; };
template <> struct StorageOf<DType::kInt32> { using type = int32_t; };
template <> struct StorageOf<DType::kInt64> { using type = int64_t; };
template <> struct StorageOf<DType::kBool> { using type = uint8_t; };  // bytes, as on the CPU

// float -> int32/int64 truncating toward zero. Out of range and NaN give the
// most negative value: what x86's cvtt* instructions, and so the CPU kernel's
// static_cast, produce there (CUDA's own conversion would saturate).
template <typename I, typename F>
__device__ inline I TruncateLikeX86(F x) {
  const F limit = static_cast<F>(uint64_t{1} << (8 * sizeof(I) - 1));
  if (x >= -limit && x < limit) return static_cast<I>(x);
  return std::numeric_limits<I>::min();
}

// One element, as the CPU's Convert: anything -> bool is "non-zero"; bool (a
// byte) -> anything is the byte's value; float -> integer truncates toward
// zero, through int32 for the narrow types so that out-of-range values wrap.
// A 16-bit float source is widened to float first (exact); a 16-bit float
// target rounds to nearest even from float or from double (one rounding, as
// numpy), integers going through double.
template <DType S, DType D>
struct CastFn {
  using Src = typename StorageOf<S>::type;
  using Dst = typename StorageOf<D>::type;

  __device__ Dst operator()(Src x) const {
    if constexpr (IsHalf(S)) {
      const float f = Load(x);
      if constexpr (IsHalf(D)) {
        return Store<Dst>(f);
      } else {
        return CastFn<DType::kFloat32, D>{}(f);
      }
    } else if constexpr (IsHalf(D)) {
      if constexpr (S == DType::kFloat32) {
        return Store<Dst>(x);
      } else if constexpr (D == DType::kFloat16) {
        return __double2half(static_cast<double>(x));
      } else {
        return __double2bfloat16(static_cast<double>(x));
      }
    } else if constexpr (D == DType::kBool) {
      return x != Src(0);
    } else if constexpr (std::is_floating_point_v<Src> && std::is_integral_v<Dst>) {
      if constexpr (sizeof(Dst) < sizeof(int32_t)) {
        return static_cast<Dst>(TruncateLikeX86<int32_t>(x));
      } else {
        return TruncateLikeX86<Dst>(x);
      }
    } else {
      return static_cast<Dst>(x);
    }
  }
};

template <DType S, DType D>
void LaunchCast(const void* in, void* out, int64_t n, cudaStream_t stream) {
  using Src = typename StorageOf<S>::type;
  using Dst = typename StorageOf<D>::type;
  if constexpr (S == D) {
    CopyIfDistinct(out, in, sizeof(Src) * n, stream);
  } else {
    LaunchMap(n, static_cast<const Src*>(in), static_cast<Dst*>(out), CastFn<S, D>{}, stream,
              "Cast kernel");
  }
}

template <DType S>
void CastFrom(DType to, const void* in, void* out, int64_t n, cudaStream_t stream) {
  switch (to) {
    case DType::kFloat32: return LaunchCast<S, DType::kFloat32>(in, out, n, stream);
    case DType::kFloat64: return LaunchCast<S, DType::kFloat64>(in, out, n, stream);
    case DType::kInt8: return LaunchCast<S, DType::kInt8>(in, out, n, stream);
    case DType::kUInt8: return LaunchCast<S, DType::kUInt8>(in, out, n, stream);
    case DType::kInt16: return LaunchCast<S, DType::kInt16>(in, out, n, stream);
    case DType::kInt32: return LaunchCast<S, DType::kInt32>(in, out, n, stream);
    case DType::kInt64: return LaunchCast<S, DType::kInt64>(in, out, n, stream);
    case DType::kFloat16: return LaunchCast<S, DType::kFloat16>(in, out, n, stream);
    case DType::kBFloat16: return LaunchCast<S, DType::kBFloat16>(in, out, n, stream);
    default: return LaunchCast<S, DType::kBool>(in, out, n, stream);
  }
}

class CastKernel : public CudaKernel {
 protected:
  // The op layer checked both dtypes against the same ten this file handles.
  void PrepareDevice(PrepareContext& ctx) override {
    from_ = ctx.in(0).dtype;
    to_ = ctx.outputs[0].dtype;
    size_ = ctx.in(0).size();
  }

  void Run(const KernelIO& io) const override {
    const void* in = io.inputs[0];
    void* out = io.outputs[0];
    cudaStream_t s = Dev(io).stream;
    switch (from_) {
      case DType::kFloat32: return CastFrom<DType::kFloat32>(to_, in, out, size_, s);
      case DType::kFloat64: return CastFrom<DType::kFloat64>(to_, in, out, size_, s);
      case DType::kInt8: return CastFrom<DType::kInt8>(to_, in, out, size_, s);
      case DType::kUInt8: return CastFrom<DType::kUInt8>(to_, in, out, size_, s);
      case DType::kInt16: return CastFrom<DType::kInt16>(to_, in, out, size_, s);
      case DType::kInt32: return CastFrom<DType::kInt32>(to_, in, out, size_, s);
      case DType::kInt64: return CastFrom<DType::kInt64>(to_, in, out, size_, s);
      case DType::kFloat16: return CastFrom<DType::kFloat16>(to_, in, out, size_, s);
      case DType::kBFloat16: return CastFrom<DType::kBFloat16>(to_, in, out, size_, s);
      default: return CastFrom<DType::kBool>(to_, in, out, size_, s);
    }
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

}  // namespace eltwise
}  // namespace cuda
}  // namespace kaiwu
