// Unary elementwise ops on CUDA, matching the CPU kernels of
// elementwise_unary.cc and elementwise_activation.cc: the float32 math and
// activations (one kernel, the op a uniform switch), Neg Abs Sign Relu also on
// int32/int64, Clip (bounds from attributes, Prepare-time constants or device
// scalars) and IsNaN/IsInf (-> bool). Every float32 one also on float16 and
// bfloat16 tensors: loaded as float, the same float math, stored rounded to
// nearest even.
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "backends/cuda/elementwise_util.cuh"
#include "backends/cuda/half_util.cuh"
#include "core/half.h"
#include "ops/unary.h"

namespace kaiwu {
namespace cuda {
namespace eltwise {
namespace {

enum class UnaryOp {
  // int32/int64 as well as float32
  kNeg, kAbs, kSign, kRelu,
  // float32 only
  kLeakyRelu, kElu, kSelu, kCelu, kHardSigmoid, kHardSwish, kGelu, kGeluTanh, kThresholdedRelu,
  kMish, kSoftplus, kSoftsign, kSigmoid, kTanh, kSqrt, kExp, kLog, kReciprocal, kFloor, kCeil,
  kRound, kSin, kCos, kErf,
};

// std::max / std::min, whose NaN behaviour the CPU kernels inherit.
__device__ inline float StdMax(float a, float b) { return a < b ? b : a; }
__device__ inline float StdMin(float a, float b) { return b < a ? b : a; }

// log(1 + e^x) without overflow, as the CPU writes it.
__device__ inline float Softplus(float x) { return StdMax(x, 0.f) + log1pf(expf(-fabsf(x))); }

struct FloatUnaryFn {
  UnaryOp op;
  float alpha, beta, gamma;

  __device__ float operator()(float x) const {
    switch (op) {
      case UnaryOp::kNeg: return -x;
      case UnaryOp::kAbs: return fabsf(x);
      case UnaryOp::kSign: return x > 0.f ? 1.f : (x < 0.f ? -1.f : x);  // keeps 0 and NaN
      case UnaryOp::kRelu: return StdMax(x, 0.f);
      case UnaryOp::kLeakyRelu: return x < 0.f ? alpha * x : x;
      case UnaryOp::kElu: return x < 0.f ? alpha * (expf(x) - 1.f) : x;
      case UnaryOp::kSelu: return gamma * (x <= 0.f ? alpha * (expf(x) - 1.f) : x);
      case UnaryOp::kCelu: return StdMax(x, 0.f) + StdMin(alpha * (expf(x / alpha) - 1.f), 0.f);
      case UnaryOp::kHardSigmoid: return StdMin(1.f, StdMax(0.f, alpha * x + beta));
      case UnaryOp::kHardSwish:
        return x * StdMin(1.f, StdMax(0.f, x * static_cast<float>(1.0 / 6.0) + 0.5f));
      case UnaryOp::kGelu: return 0.5f * x * (1.f + erff(x * 0.70710678118654752440f));
      case UnaryOp::kGeluTanh: {
        const float k = 0.79788456080286535588f;  // sqrt(2 / pi)
        return 0.5f * x * (1.f + tanhf(k * (x + 0.044715f * x * x * x)));
      }
      case UnaryOp::kThresholdedRelu: return x > alpha ? x : 0.f;
      case UnaryOp::kMish: return x * tanhf(Softplus(x));
      case UnaryOp::kSoftplus: return Softplus(x);
      case UnaryOp::kSoftsign: return x / (1.f + fabsf(x));
      case UnaryOp::kSigmoid: return 1.f / (1.f + expf(-x));
      case UnaryOp::kTanh: return tanhf(x);
      case UnaryOp::kSqrt: return sqrtf(x);
      case UnaryOp::kExp: return expf(x);
      case UnaryOp::kLog: return logf(x);
      case UnaryOp::kReciprocal: return 1.f / x;
      case UnaryOp::kFloor: return floorf(x);
      case UnaryOp::kCeil: return ceilf(x);
      case UnaryOp::kRound: return rintf(x);  // halves to even, as ONNX asks
      case UnaryOp::kSin: return sinf(x);
      case UnaryOp::kCos: return cosf(x);
      case UnaryOp::kErf: return erff(x);
    }
    return x;
  }
};

// Neg and Abs wrap (the most negative value maps to itself), as on the CPU.
template <typename T>
struct IntUnaryFn {
  UnaryOp op;

  __device__ static T WrapNeg(T x) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(U(0) - static_cast<U>(x)));
  }
  __device__ T operator()(T x) const {
    switch (op) {
      case UnaryOp::kNeg: return WrapNeg(x);
      case UnaryOp::kAbs: return x < 0 ? WrapNeg(x) : x;
      case UnaryOp::kSign: return static_cast<T>((x > 0) - (x < 0));
      default: return x > 0 ? x : T(0);  // kRelu
    }
  }
};

// The float unary functors (erf for GELU, tanh, exp ...) cost tens of
// instructions an element: below a few waves of threads, packs of 16 bytes
// leave most SMs idle (a GELU over [32 x 32, 128] halfs: 16,384 threads, 4 us on
// an H100), so small tensors take packs of two elements (four times the threads).
constexpr int64_t kUnaryNarrowBelow = 65536;  // packs of 16 bytes

template <typename X, typename Y, typename F>
void LaunchUnaryMap(int64_t n, const X* x, Y* y, F f, cudaStream_t stream) {
  constexpr int V = PackWidth<X, Y>();
  if (V > 2 && n > 0 && n / V < kUnaryNarrowBelow && n % 2 == 0 && PackAligned(x, 2 * sizeof(X)) &&
      PackAligned(y, 2 * sizeof(Y))) {
    MapPackKernel<2><<<GridFor(n / 2), kBlock, 0, stream>>>(n / 2, x, y, f);
    CheckLaunch("unary kernel");
    return;
  }
  LaunchMap(n, x, y, f, stream, "unary kernel");
}

class UnaryKernel : public CudaKernel {
 public:
  explicit UnaryKernel(UnaryOp op) : op_(op) {}

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    // The activations' attributes, checked by the op layer (ops/unary.h).
    if (const auto* p = dynamic_cast<const ActivationParams*>(ctx.params.get())) {
      alpha_ = p->alpha;
      beta_ = p->beta;
      gamma_ = p->gamma;
      if (op_ == UnaryOp::kGelu && p->gelu_tanh) op_ = UnaryOp::kGeluTanh;
    }
    dtype_ = ctx.in(0).dtype;
    size_ = ctx.in(0).size();
  }

  void Run(const KernelIO& io) const override {
    cudaStream_t s = Dev(io).stream;
    switch (dtype_) {
      case DType::kInt32: return RunInt<int32_t>(io, s);
      case DType::kInt64: return RunInt<int64_t>(io, s);
      case DType::kFloat16: return RunHalf<__half>(io, s);
      case DType::kBFloat16: return RunHalf<__nv_bfloat16>(io, s);
      default:
        return LaunchUnaryMap(size_, static_cast<const float*>(io.inputs[0]),
                              static_cast<float*>(io.outputs[0]), FloatUnaryFn{op_, alpha_, beta_, gamma_}, s);
    }
  }

 private:
  template <typename T>
  void RunHalf(const KernelIO& io, cudaStream_t s) const {
    LaunchUnaryMap(size_, static_cast<const T*>(io.inputs[0]), static_cast<T*>(io.outputs[0]),
                   Widened<T, FloatUnaryFn>{FloatUnaryFn{op_, alpha_, beta_, gamma_}}, s);
  }

  template <typename T>
  void RunInt(const KernelIO& io, cudaStream_t s) const {
    LaunchMap(size_, static_cast<const T*>(io.inputs[0]), static_cast<T*>(io.outputs[0]),
              IntUnaryFn<T>{op_}, s, "unary kernel");
  }

  UnaryOp op_;
  float alpha_ = 0.f, beta_ = 0.f, gamma_ = 0.f;
  DType dtype_ = DType::kUndefined;
  int64_t size_ = 0;
};

// y = min(max(x, lo), hi) written as the CPU does (NaN passes through; lo > hi
// gives hi). A bound given as a device pointer is read there, else `lo`/`hi`.
// 16-bit floats compare as float.
template <typename T>
__global__ void ClampKernel(int64_t n, const T* x, T* y, ComputeT<T> lo, ComputeT<T> hi,
                            const T* lo_dev, const T* hi_dev) {
  if (lo_dev) lo = Load(*lo_dev);
  if (hi_dev) hi = Load(*hi_dev);
  KAIWU_CUDA_LOOP(i, n) {
    const ComputeT<T> xi = Load(x[i]);
    const ComputeT<T> v = xi < lo ? lo : xi;
    y[i] = Store<T>(v > hi ? hi : v);
  }
}

// Clip: opset >= 11 takes min and max as optional one-element inputs, baked in
// when known at Prepare and read on the device otherwise; older opsets carry
// them as float attributes.
class ClipKernel : public CudaKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const ClipParams& p = ctx.Params<ClipParams>();
    dtype_ = ctx.in(0).dtype;
    attr_bounds_ = p.attr_bounds;
    attr_min_ = p.attr_min;
    attr_max_ = p.attr_max;
    for (int b = 0; b < 2; ++b) {
      has_bound_[b] = p.has_bound[b];
      known_bound_[b] = has_bound_[b] && ctx.in(b + 1).data != nullptr;
      if (known_bound_[b])
        std::memcpy(bound_bytes_[b], ctx.in(b + 1).data, DTypeSize(dtype_));
    }
    size_ = ctx.in(0).size();
  }

  void Run(const KernelIO& io) const override {
    switch (dtype_) {
      case DType::kFloat16: return RunTyped<__half>(io);
      case DType::kBFloat16: return RunTyped<__nv_bfloat16>(io);
      default: WithNumericType(dtype_, [&](auto t) { RunTyped<decltype(t)>(io); });
    }
  }

 private:
  // A bound known at Prepare, in the compute type.
  template <typename T>
  ComputeT<T> KnownBound(int b) const {
    if constexpr (std::is_same_v<T, ComputeT<T>>) {
      T v;
      std::memcpy(&v, bound_bytes_[b], sizeof(T));
      return v;
    } else {
      uint16_t bits;
      std::memcpy(&bits, bound_bytes_[b], 2);
      return std::is_same_v<T, __half> ? HalfToFloat(bits) : BFloat16ToFloat(bits);
    }
  }

  template <typename T>
  void RunTyped(const KernelIO& io) const {
    using C = ComputeT<T>;
    C bound[2] = {std::numeric_limits<C>::lowest(), std::numeric_limits<C>::max()};
    if (attr_bounds_) {
      bound[0] = static_cast<C>(attr_min_);
      bound[1] = static_cast<C>(attr_max_);
    }
    const T* dev[2] = {nullptr, nullptr};
    for (int b = 0; b < 2; ++b) {
      if (known_bound_[b]) {
        bound[b] = KnownBound<T>(b);
      } else if (has_bound_[b]) {
        dev[b] = static_cast<const T*>(io.inputs[b + 1]);
      }
    }
    if (size_ <= 0) return;
    ClampKernel<<<GridFor(size_), kBlock, 0, Dev(io).stream>>>(
        size_, static_cast<const T*>(io.inputs[0]), static_cast<T*>(io.outputs[0]), bound[0],
        bound[1], dev[0], dev[1]);
    CheckLaunch("Clip kernel");
  }

  DType dtype_ = DType::kUndefined;
  bool attr_bounds_ = false;
  float attr_min_ = 0.f, attr_max_ = 0.f;
  bool has_bound_[2] = {false, false};
  bool known_bound_[2] = {false, false};
  unsigned char bound_bytes_[2][8] = {};
  int64_t size_ = 0;
};

// IsNaN, or IsInf(detect_positive, detect_negative); bool out as bytes.
struct IsSpecialFn {
  bool nan, pos, neg;
  __device__ uint8_t operator()(float x) const {
    if (nan) return x != x;
    return (pos && x == INFINITY) || (neg && x == -INFINITY);
  }
};

template <typename T>
struct IsSpecialOf {
  IsSpecialFn f;
  __device__ uint8_t operator()(T x) const { return f(Load(x)); }
};

class IsSpecialKernel : public CudaKernel {
 public:
  explicit IsSpecialKernel(bool nan) : nan_(nan) {}

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    if (!nan_) {
      const IsInfParams& p = ctx.Params<IsInfParams>();
      pos_ = p.detect_positive;
      neg_ = p.detect_negative;
    }
    dtype_ = ctx.in(0).dtype;
    size_ = ctx.in(0).size();
  }

  void Run(const KernelIO& io) const override {
    WithFloatType(dtype_, [&](auto t) {
      using T = decltype(t);
      LaunchMap(size_, static_cast<const T*>(io.inputs[0]), static_cast<uint8_t*>(io.outputs[0]),
                IsSpecialOf<T>{{nan_, pos_, neg_}}, Dev(io).stream,
                nan_ ? "IsNaN kernel" : "IsInf kernel");
    });
  }

 private:
  DType dtype_ = DType::kUndefined;
  bool nan_;
  bool pos_ = true, neg_ = true;
  int64_t size_ = 0;
};

template <UnaryOp kOp>
std::unique_ptr<Kernel> MakeUnary(const Node&) {
  return std::make_unique<UnaryKernel>(kOp);
}

template <bool kNaN>
std::unique_ptr<Kernel> MakeIsSpecial(const Node&) {
  return std::make_unique<IsSpecialKernel>(kNaN);
}

}  // namespace

void RegisterUnaryKernels(KernelRegistry& r) {
  const std::initializer_list<DType> numeric = {DType::kFloat32, DType::kInt32, DType::kInt64,
                                                DType::kFloat16, DType::kBFloat16};
  const std::initializer_list<DType> floats = {DType::kFloat32, DType::kFloat16,
                                               DType::kBFloat16};
  r.Register(OpId::kNeg, numeric, &MakeUnary<UnaryOp::kNeg>);
  r.Register(OpId::kAbs, numeric, &MakeUnary<UnaryOp::kAbs>);
  r.Register(OpId::kSign, numeric, &MakeUnary<UnaryOp::kSign>);
  r.Register(OpId::kRelu, numeric, &MakeUnary<UnaryOp::kRelu>);
  r.Register(OpId::kLeakyRelu, floats, &MakeUnary<UnaryOp::kLeakyRelu>);
  r.Register(OpId::kElu, floats, &MakeUnary<UnaryOp::kElu>);
  r.Register(OpId::kSelu, floats, &MakeUnary<UnaryOp::kSelu>);
  r.Register(OpId::kCelu, floats, &MakeUnary<UnaryOp::kCelu>);
  r.Register(OpId::kHardSigmoid, floats, &MakeUnary<UnaryOp::kHardSigmoid>);
  r.Register(OpId::kHardSwish, floats, &MakeUnary<UnaryOp::kHardSwish>);
  r.Register(OpId::kGelu, floats, &MakeUnary<UnaryOp::kGelu>);
  r.Register(OpId::kThresholdedRelu, floats, &MakeUnary<UnaryOp::kThresholdedRelu>);
  r.Register(OpId::kMish, floats, &MakeUnary<UnaryOp::kMish>);
  r.Register(OpId::kSoftplus, floats, &MakeUnary<UnaryOp::kSoftplus>);
  r.Register(OpId::kSoftsign, floats, &MakeUnary<UnaryOp::kSoftsign>);
  r.Register(OpId::kSigmoid, floats, &MakeUnary<UnaryOp::kSigmoid>);
  r.Register(OpId::kTanh, floats, &MakeUnary<UnaryOp::kTanh>);
  r.Register(OpId::kSqrt, floats, &MakeUnary<UnaryOp::kSqrt>);
  r.Register(OpId::kExp, floats, &MakeUnary<UnaryOp::kExp>);
  r.Register(OpId::kLog, floats, &MakeUnary<UnaryOp::kLog>);
  r.Register(OpId::kReciprocal, floats, &MakeUnary<UnaryOp::kReciprocal>);
  r.Register(OpId::kFloor, floats, &MakeUnary<UnaryOp::kFloor>);
  r.Register(OpId::kCeil, floats, &MakeUnary<UnaryOp::kCeil>);
  r.Register(OpId::kRound, floats, &MakeUnary<UnaryOp::kRound>);
  r.Register(OpId::kSin, floats, &MakeUnary<UnaryOp::kSin>);
  r.Register(OpId::kCos, floats, &MakeUnary<UnaryOp::kCos>);
  r.Register(OpId::kErf, floats, &MakeUnary<UnaryOp::kErf>);
  r.Register(OpId::kClip, numeric, &MakeKernel<ClipKernel>);
  r.Register(OpId::kIsNaN, floats, &MakeIsSpecial<true>);
  r.Register(OpId::kIsInf, floats, &MakeIsSpecial<false>);
}

}  // namespace eltwise
}  // namespace cuda
}  // namespace kaiwu
