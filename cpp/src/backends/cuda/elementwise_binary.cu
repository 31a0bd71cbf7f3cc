// Broadcasting arithmetic on CUDA, matching elementwise_binary.cc: Add Sub Mul
// Div Mod Min Max (float32, int32, int64), Sum Mean (float32), all variadic
// ones folded pairwise into the output; Pow (float32 base with a float32 or
// integer exponent, integer base with an integer exponent) and PRelu. All of
// them also on float16/bfloat16 tensors: loaded as float, computed as the
// float32 kernel does, stored rounded to nearest (a variadic fold rounds
// after each pairwise step, as it stores into the output); a 16-bit Pow base
// takes an exponent of its own dtype, float32, int32 or int64.
// Integer + - * wrap; integer division by zero reports bad data.
#include <cmath>
#include <type_traits>

#include "backends/cuda/elementwise_util.cuh"
#include "backends/cuda/half_util.cuh"
#include "backends/int_pow.h"
#include "ops/binary.h"

namespace kaiwu {
namespace cuda {
namespace eltwise {
namespace {

enum class ArithOp { kAdd, kSub, kMul, kDiv, kMod, kFmod, kMin, kMax, kSum, kMean };

// +, -, * in unsigned arithmetic for integers, where wrapping is defined.
template <typename T>
__device__ inline T WrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <typename T>
__device__ inline T WrapSub(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
  } else {
    return a - b;
  }
}

template <typename T>
__device__ inline T WrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

// One step of a pairwise fold. `scale` (Mean) multiplies the last step's sum;
// integer division by zero reports bad data through the error flag and gives 0.
template <typename T>
struct ArithFn {
  ArithOp op;
  T scale;
  int* error_flag;
  int step;

  __device__ T operator()(T a, T b) const {
    switch (op) {
      case ArithOp::kAdd:
      case ArithOp::kSum: return WrapAdd(a, b);
      case ArithOp::kMean: return WrapAdd(a, b) * scale;
      case ArithOp::kSub: return WrapSub(a, b);
      case ArithOp::kMul: return WrapMul(a, b);
      case ArithOp::kMin: return (b < a || b != b) ? b : a;  // NaN propagates
      case ArithOp::kMax: return (b > a || b != b) ? b : a;
      default: break;
    }
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) {
        ReportError(error_flag, step);
        return 0;
      }
      // b == -1 apart, so that the most negative value / -1 wraps instead of trapping.
      using U = std::make_unsigned_t<T>;
      const T rem = b == T(-1) ? T(0) : static_cast<T>(a % b);
      switch (op) {
        case ArithOp::kDiv:
          return b == T(-1) ? static_cast<T>(U(0) - static_cast<U>(a)) : static_cast<T>(a / b);
        case ArithOp::kFmod: return rem;
        default:  // kMod: Python-style, the result takes the divisor's sign
          return rem != 0 && ((rem < 0) != (b < 0)) ? static_cast<T>(rem + b) : rem;
      }
    } else {
      return op == ArithOp::kDiv ? a / b : fmodf(a, b);  // kFmod
    }
  }
};

class ArithKernel : public CudaKernel {
 public:
  explicit ArithKernel(ArithOp op) : op_(op) {}

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    if (op_ == ArithOp::kMod || op_ == ArithOp::kFmod)
      op_ = ctx.Params<ModParams>().fmod ? ArithOp::kFmod : ArithOp::kMod;
    dtype_ = ctx.in(0).dtype;
    num_inputs_ = ctx.num_inputs();
    const Shape& out = ctx.outputs[0].shape;
    out_size_ = NumElements(out);
    steps_.clear();
    for (int i = 1; i < num_inputs_; ++i)
      steps_.push_back(MakeIndexer<2>(ctx, {i == 1 ? ctx.in(0).shape : out, ctx.in(i).shape}, out));
  }

  void Run(const KernelIO& io) const override {
    switch (dtype_) {
      case DType::kFloat16: return RunTyped<__half>(io);
      case DType::kBFloat16: return RunTyped<__nv_bfloat16>(io);
      default: WithNumericType(dtype_, [&](auto t) { RunTyped<decltype(t)>(io); });
    }
  }

 private:
  // T: the storage type; the math is ArithFn<float> for the 16-bit floats.
  template <typename T>
  void RunTyped(const KernelIO& io) const {
    using C = ComputeT<T>;
    const DeviceContext& dev = Dev(io);
    T* out = static_cast<T*>(io.outputs[0]);
    const T* in0 = static_cast<const T*>(io.inputs[0]);
    if (num_inputs_ == 1) {
      CopyIfDistinct(out, in0, sizeof(T) * out_size_, dev.stream);
      return;
    }
    for (int i = 1; i < num_inputs_; ++i) {
      // Mean sums like Sum and scales in the last step, as (a + b) * (1 / n).
      const bool last = i + 1 == num_inputs_;
      const ArithOp op = op_ == ArithOp::kMean && !last ? ArithOp::kSum : op_;
      const ArithFn<C> f{op, static_cast<C>(1) / static_cast<C>(num_inputs_), dev.error_flag,
                         dev.step};
      if constexpr (std::is_same_v<T, C>) {
        LaunchBinary(steps_[i - 1], out_size_, i == 1 ? in0 : out,
                     static_cast<const T*>(io.inputs[i]), out, f, dev.stream, "arithmetic kernel");
      } else {
        LaunchBinary(steps_[i - 1], out_size_, i == 1 ? in0 : out,
                     static_cast<const T*>(io.inputs[i]), out, Widened2<T, ArithFn<C>>{f},
                     dev.stream, "arithmetic kernel");
      }
    }
  }

  ArithOp op_;
  DType dtype_ = DType::kUndefined;
  int num_inputs_ = 0;
  int64_t out_size_ = 0;
  std::vector<ElementIndexer<2>> steps_;  // input i folded into the output: steps_[i - 1]
};

// A one-element exponent of 2, 3, 1 or 0.5 is applied without pow(), as the
// CPU kernel does (this differs from pow at -0 and -inf for 0.5).
template <typename T, typename E>
struct PowFn {
  bool scalar_exp;

  __device__ T operator()(T x, E y) const {
    if constexpr (std::is_integral_v<T>) {
      return IntPow(x, y);
    } else {
      if (scalar_exp) {
        const double e = static_cast<double>(y);
        if (e == 2.0) return x * x;
        if (e == 3.0) return x * x * x;
        if (e == 1.0) return x;
        if (e == 0.5) return sqrtf(x);
      }
      return powf(x, static_cast<float>(y));
    }
  }
};

// Pow of a 16-bit base: the float32 math on the widened operands.
template <typename T, typename E>
struct HalfPowFn {
  PowFn<float, ComputeT<E>> f;
  __device__ T operator()(T x, E y) const { return Store<T>(f(Load(x), Load(y))); }
};

class PowKernel : public CudaKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    base_ = ctx.in(0).dtype;
    // The kernel table checked the base; the exponent dtypes this kernel takes with it:
    if (base_ == DType::kFloat16 || base_ == DType::kBFloat16) {
      RequireDType(ctx, 1, {base_, DType::kFloat32, DType::kInt32, DType::kInt64});
    } else if (base_ == DType::kFloat32) {
      RequireDType(ctx, 1, {DType::kFloat32, DType::kInt32, DType::kInt64});
    } else {
      RequireDType(ctx, 1, {DType::kInt32, DType::kInt64});
    }
    exp_ = ctx.in(1).dtype;
    const Shape& out = ctx.outputs[0].shape;
    size_ = NumElements(out);
    scalar_exp_ = ctx.in(1).size() == 1;
    ix_ = MakeIndexer<2>(ctx, {ctx.in(0).shape, ctx.in(1).shape}, out);
  }

  void Run(const KernelIO& io) const override {
    switch (base_) {
      case DType::kFloat16: return RunHalf<__half>(io);
      case DType::kBFloat16: return RunHalf<__nv_bfloat16>(io);
      default: WithNumericType(base_, [&](auto t) { RunBase<decltype(t)>(io); });
    }
  }

 private:
  template <typename T>
  void RunHalf(const KernelIO& io) const {
    switch (exp_) {
      case DType::kFloat16:
      case DType::kBFloat16: return RunTyped<T, T>(io);
      case DType::kInt32: return RunTyped<T, int32_t>(io);
      case DType::kInt64: return RunTyped<T, int64_t>(io);
      default: return RunTyped<T, float>(io);
    }
  }

  template <typename T>
  void RunBase(const KernelIO& io) const {
    WithNumericType(exp_, [&](auto e) {
      using E = decltype(e);
      // A float exponent comes with a float base (Prepare refuses the rest).
      if constexpr (std::is_integral_v<E> || std::is_floating_point_v<T>) RunTyped<T, E>(io);
    });
  }

  template <typename T, typename E>
  void RunTyped(const KernelIO& io) const {
    const T* x = static_cast<const T*>(io.inputs[0]);
    const E* y = static_cast<const E*>(io.inputs[1]);
    T* out = static_cast<T*>(io.outputs[0]);
    if constexpr (std::is_same_v<T, ComputeT<T>>) {
      LaunchBinary(ix_, size_, x, y, out, PowFn<T, E>{scalar_exp_}, Dev(io).stream, "Pow kernel");
    } else {
      LaunchBinary(ix_, size_, x, y, out, HalfPowFn<T, E>{{scalar_exp_}}, Dev(io).stream,
                   "Pow kernel");
    }
  }

  DType base_ = DType::kUndefined, exp_ = DType::kUndefined;
  bool scalar_exp_ = false;
  int64_t size_ = 0;
  ElementIndexer<2> ix_;
};

// PRelu: y = x < 0 ? slope * x : x, the slope broadcasting to x's shape.
template <typename T>
struct PReluFn {
  __device__ T operator()(T x, T s) const { return x < T(0) ? WrapMul(x, s) : x; }
};

class PReluKernel : public CudaKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    dtype_ = ctx.in(0).dtype;
    const Shape& out = ctx.outputs[0].shape;
    size_ = NumElements(out);
    ix_ = MakeIndexer<2>(ctx, {ctx.in(0).shape, ctx.in(1).shape}, out);
  }

  void Run(const KernelIO& io) const override {
    switch (dtype_) {
      case DType::kFloat16: return RunTyped<__half>(io);
      case DType::kBFloat16: return RunTyped<__nv_bfloat16>(io);
      default: WithNumericType(dtype_, [&](auto t) { RunTyped<decltype(t)>(io); });
    }
  }

 private:
  template <typename T>
  void RunTyped(const KernelIO& io) const {
    const T* x = static_cast<const T*>(io.inputs[0]);
    const T* slope = static_cast<const T*>(io.inputs[1]);
    T* out = static_cast<T*>(io.outputs[0]);
    if constexpr (std::is_same_v<T, ComputeT<T>>) {
      LaunchBinary(ix_, size_, x, slope, out, PReluFn<T>{}, Dev(io).stream, "PRelu kernel");
    } else {
      LaunchBinary(ix_, size_, x, slope, out, Widened2<T, PReluFn<float>>{}, Dev(io).stream,
                   "PRelu kernel");
    }
  }

  DType dtype_ = DType::kUndefined;
  int64_t size_ = 0;
  ElementIndexer<2> ix_;
};

template <ArithOp kOp>
std::unique_ptr<Kernel> MakeArith(const Node&) {
  return std::make_unique<ArithKernel>(kOp);
}

}  // namespace

void RegisterArithmeticKernels(KernelRegistry& r) {
  const std::initializer_list<DType> numeric = {DType::kFloat32, DType::kInt32, DType::kInt64,
                                                DType::kFloat16, DType::kBFloat16};
  const std::initializer_list<DType> floats = {DType::kFloat32, DType::kFloat16,
                                               DType::kBFloat16};
  r.Register(OpId::kAdd, numeric, &MakeArith<ArithOp::kAdd>);
  r.Register(OpId::kSub, numeric, &MakeArith<ArithOp::kSub>);
  r.Register(OpId::kMul, numeric, &MakeArith<ArithOp::kMul>);
  r.Register(OpId::kDiv, numeric, &MakeArith<ArithOp::kDiv>);
  r.Register(OpId::kMod, numeric, &MakeArith<ArithOp::kMod>);
  r.Register(OpId::kMin, numeric, &MakeArith<ArithOp::kMin>);
  r.Register(OpId::kMax, numeric, &MakeArith<ArithOp::kMax>);
  r.Register(OpId::kSum, floats, &MakeArith<ArithOp::kSum>);
  r.Register(OpId::kMean, floats, &MakeArith<ArithOp::kMean>);
  r.Register(OpId::kPow, numeric, &MakeKernel<PowKernel>);
  r.Register(OpId::kPRelu, numeric, &MakeKernel<PReluKernel>);
}

}  // namespace eltwise
}  // namespace cuda
}  // namespace kaiwu
