// Broadcasting arithmetic: Add Sub Mul Div Mod (binary), Min Max Sum Mean
// (variadic), Pow (base and exponent of different dtypes) and PRelu.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backends/cpu/elementwise_util.h"
#include "backends/int_pow.h"
#include "ops/binary.h"

namespace kaiwu {
namespace cpu {
namespace {

enum class ArithOp { kAdd, kSub, kMul, kDiv, kMod, kFmod, kMin, kMax, kSum, kMean };

// +, -, * that wrap on integer overflow (done in unsigned arithmetic, where
// wrapping is defined) and are plain operators on floats.
template <typename T>
inline T WrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}

template <typename T>
inline T WrapSub(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
  } else {
    return a - b;
  }
}

template <typename T>
inline T WrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    // Narrow types promote to int, whose products of two 16-bit values fit.
    using U = std::conditional_t<(sizeof(T) < sizeof(int)), int, std::make_unsigned_t<T>>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

// a / b for integers: b == -1 is handled apart so that INT_MIN / -1 wraps
// instead of trapping; b == 0 is rejected before the loop.
template <typename T>
inline T IntDiv(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    if (b == T(-1)) return static_cast<T>(U(0) - static_cast<U>(a));
  }
  return static_cast<T>(a / b);
}

template <typename T>
inline T IntRem(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b == T(-1)) return T(0);
  }
  return static_cast<T>(a % b);
}

// Python-style modulus: the result takes the divisor's sign.
template <typename T>
inline T IntMod(T a, T b) {
  T r = IntRem(a, b);
  if constexpr (std::is_signed_v<T>) {
    if (r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
  }
  return r;
}

class ArithKernel : public Kernel {
 public:
  ArithKernel(ArithOp op, std::string name) : op_(op), name_(std::move(name)) {}

  void Prepare(PrepareContext& ctx) override {
    const int n = ctx.num_inputs();
    dtype_ = ctx.outputs[0].dtype;
    if (op_ == ArithOp::kMod || op_ == ArithOp::kFmod)
      op_ = ctx.Params<ModParams>().fmod ? ArithOp::kFmod : ArithOp::kMod;
    const Shape& out = ctx.outputs[0].shape;
    plans_.clear();
    for (int i = 1; i < n; ++i)
      plans_.push_back(
          MakeBroadcastPlan(ctx, {i == 1 ? ctx.in(0).shape : out, ctx.in(i).shape}, out));
    num_inputs_ = n;
    out_size_ = NumElements(out);
    input_sizes_.clear();
    for (int i = 0; i < n; ++i) input_sizes_.push_back(ctx.in(i).size());
  }

  void Run(const KernelIO& io) const override {
    KAIWU_DISPATCH_NUMERIC(dtype_, RunTyped<T>(io));
  }

 private:
  template <typename T>
  void RunTyped(const KernelIO& io) const {
    T* out = static_cast<T*>(io.outputs[0]);
    const T* in0 = static_cast<const T*>(io.inputs[0]);
    if (num_inputs_ == 1) {
      if (out != in0) std::memcpy(out, in0, sizeof(T) * out_size_);
      return;
    }
    if constexpr (std::is_integral_v<T>) {
      if (op_ == ArithOp::kDiv || op_ == ArithOp::kMod || op_ == ArithOp::kFmod) {
        const T* b = static_cast<const T*>(io.inputs[1]);
        for (int64_t i = 0; i < input_sizes_[1]; ++i)
          if (b[i] == 0)
            Fail(StatusCode::kRuntime, name_, ": integer division by zero");
      }
    }
    for (int i = 1; i < num_inputs_; ++i) {
      const T* a = i == 1 ? in0 : out;
      const T* b = static_cast<const T*>(io.inputs[i]);
      Apply<T>(plans_[i - 1], a, b, out, io.pool);
    }
    if constexpr (std::is_floating_point_v<T>) {
      if (op_ == ArithOp::kMean) {
        const T scale = T(1) / static_cast<T>(num_inputs_);
        ParallelElements(io.pool, out_size_, 1.0, [&](int64_t b, int64_t e) {
          for (int64_t j = b; j < e; ++j) out[j] *= scale;
        });
      }
    }
  }

  template <typename T>
  void Apply(const BroadcastPlan& p, const T* a, const T* b, T* o, ThreadPool* pool) const {
    switch (op_) {
      case ArithOp::kAdd:
      case ArithOp::kSum:
      case ArithOp::kMean:
        return BinaryLoop(p, a, b, o, [](T x, T y) { return WrapAdd(x, y); }, pool);
      case ArithOp::kSub:
        return BinaryLoop(p, a, b, o, [](T x, T y) { return WrapSub(x, y); }, pool);
      case ArithOp::kMul:
        return BinaryLoop(p, a, b, o, [](T x, T y) { return WrapMul(x, y); }, pool);
      case ArithOp::kDiv:
        if constexpr (std::is_integral_v<T>) {
          return BinaryLoop(p, a, b, o, [](T x, T y) { return IntDiv(x, y); }, pool, 4.0);
        } else {
          return BinaryLoop(p, a, b, o, [](T x, T y) { return x / y; }, pool);
        }
      case ArithOp::kMin:
        // NaN in either operand propagates (y != y only for NaN).
        return BinaryLoop(p, a, b, o, [](T x, T y) { return (y < x || y != y) ? y : x; }, pool);
      case ArithOp::kMax:
        return BinaryLoop(p, a, b, o, [](T x, T y) { return (y > x || y != y) ? y : x; }, pool);
      case ArithOp::kMod:
        if constexpr (std::is_integral_v<T>) {
          return BinaryLoop(p, a, b, o, [](T x, T y) { return IntMod(x, y); }, pool, 4.0);
        }
        break;
      case ArithOp::kFmod:
        if constexpr (std::is_integral_v<T>) {
          return BinaryLoop(p, a, b, o, [](T x, T y) { return IntRem(x, y); }, pool, 4.0);
        } else {
          return BinaryLoop(p, a, b, o, [](T x, T y) { return std::fmod(x, y); }, pool, 8.0);
        }
    }
  }

  ArithOp op_;
  std::string name_;
  DType dtype_ = DType::kUndefined;
  int num_inputs_ = 0;
  int64_t out_size_ = 0;
  std::vector<int64_t> input_sizes_;
  std::vector<BroadcastPlan> plans_;
};

class PowKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    base_ = ctx.in(0).dtype;
    exp_ = ctx.in(1).dtype;
    plan_ = MakeBroadcastPlan(ctx, {ctx.in(0).shape, ctx.in(1).shape}, ctx.outputs[0].shape);
    scalar_exp_ = ctx.in(1).size() == 1;
  }

  void Run(const KernelIO& io) const override {
    switch (base_) {
      case DType::kFloat32: return RunBase<float>(io);
      case DType::kFloat64: return RunBase<double>(io);
      case DType::kInt32: return RunBase<int32_t>(io);
      case DType::kInt64: return RunBase<int64_t>(io);
      default: Fail(StatusCode::kInternal, "Pow: unsupported base dtype");
    }
  }

 private:
  template <typename B>
  void RunBase(const KernelIO& io) const {
    const B* a = static_cast<const B*>(io.inputs[0]);
    B* o = static_cast<B*>(io.outputs[0]);
    KAIWU_DISPATCH_NUMERIC(exp_, RunTyped<B, T>(a, io.inputs[1], o, io.pool));
  }

  template <typename T, typename E>
  void RunTyped(const T* a, const void* exp_data, T* o, ThreadPool* pool) const {
    const E* b = static_cast<const E*>(exp_data);
    if constexpr (std::is_floating_point_v<T>) {
      if (scalar_exp_) {
        // Common fixed exponents without calling pow().
        const double e = static_cast<double>(b[0]);
        auto run = [&](auto f) {
          ParallelElements(pool, plan_.total, 1.0, [&](int64_t s, int64_t t) {
            for (int64_t i = s; i < t; ++i) o[i] = f(a[i]);
          });
        };
        // A one-element exponent leaves the base's elements in output order.
        if (e == 2.0) return run([](T x) { return x * x; });
        if (e == 3.0) return run([](T x) { return x * x * x; });
        if (e == 1.0) return run([](T x) { return x; });
        if (e == 0.5) return run([](T x) { return std::sqrt(x); });
      }
      return BinaryLoop(plan_, a, b, o, [](T x, E y) { return std::pow(x, static_cast<T>(y)); },
                        pool, 10.0);
    } else if constexpr (std::is_integral_v<E>) {
      return BinaryLoop(plan_, a, b, o, [](T x, E y) { return IntPow(x, y); }, pool, 10.0);
    } else {
      return BinaryLoop(plan_, a, b, o, [](T x, E y) {
        return static_cast<T>(std::pow(static_cast<double>(x), static_cast<double>(y)));
      }, pool, 10.0);
    }
  }

  DType base_ = DType::kUndefined, exp_ = DType::kUndefined;
  bool scalar_exp_ = false;
  BroadcastPlan plan_;
};

// PRelu: y = x < 0 ? slope * x : x, the slope broadcasting to x's shape.
class PReluKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    dtype_ = ctx.in(0).dtype;
    plan_ = MakeBroadcastPlan(ctx, {ctx.in(0).shape, ctx.in(1).shape}, ctx.outputs[0].shape);
  }

  void Run(const KernelIO& io) const override {
    switch (dtype_) {
      case DType::kFloat32: return RunTyped<float>(io);
      case DType::kFloat64: return RunTyped<double>(io);
      case DType::kInt32: return RunTyped<int32_t>(io);
      case DType::kInt64: return RunTyped<int64_t>(io);
      default: Fail(StatusCode::kInternal, "PRelu: unsupported dtype");
    }
  }

 private:
  template <typename T>
  void RunTyped(const KernelIO& io) const {
    BinaryLoop(plan_, static_cast<const T*>(io.inputs[0]), static_cast<const T*>(io.inputs[1]),
               static_cast<T*>(io.outputs[0]),
               [](T x, T s) { return x < T(0) ? WrapMul(x, s) : x; }, io.pool);
  }

  DType dtype_ = DType::kUndefined;
  BroadcastPlan plan_;
};

template <ArithOp kOp>
std::unique_ptr<Kernel> MakeArith(const Node& node) {
  return std::make_unique<ArithKernel>(kOp, node.Describe());
}

}  // namespace

void RegisterArithmeticKernels(KernelRegistry& r) {
  const std::initializer_list<DType> numeric = {DType::kFloat32, DType::kFloat64, DType::kInt8,
                                                DType::kUInt8,   DType::kInt16,   DType::kInt32,
                                                DType::kInt64};
  const std::initializer_list<DType> floats = {DType::kFloat32, DType::kFloat64};
  // Pow's base and PRelu: floats and the wide integers.
  const std::initializer_list<DType> float_int = {DType::kFloat32, DType::kFloat64, DType::kInt32,
                                                  DType::kInt64};
  r.Register(OpId::kAdd, numeric, &MakeArith<ArithOp::kAdd>);
  r.Register(OpId::kSub, numeric, &MakeArith<ArithOp::kSub>);
  r.Register(OpId::kMul, numeric, &MakeArith<ArithOp::kMul>);
  r.Register(OpId::kDiv, numeric, &MakeArith<ArithOp::kDiv>);
  r.Register(OpId::kMod, numeric, &MakeArith<ArithOp::kMod>);
  r.Register(OpId::kMin, numeric, &MakeArith<ArithOp::kMin>);
  r.Register(OpId::kMax, numeric, &MakeArith<ArithOp::kMax>);
  r.Register(OpId::kSum, floats, &MakeArith<ArithOp::kSum>);
  r.Register(OpId::kMean, floats, &MakeArith<ArithOp::kMean>);
  r.Register(OpId::kPow, float_int, &MakeKernel<PowKernel>);
  r.Register(OpId::kPRelu, float_int, &MakeKernel<PReluKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
