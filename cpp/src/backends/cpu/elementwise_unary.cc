// Unary math: Neg Abs Sign (numeric), Sqrt Exp Log Reciprocal Floor Ceil Round
// Sin Cos Erf Sigmoid Tanh Softplus Softsign (float), and IsNaN IsInf (-> bool).
// Float loops go through Eigen array expressions, which vectorise exp/log/tanh/erf.
#include <cmath>
#include <limits>
#include <type_traits>

#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include "backends/cpu/elementwise_util.h"
#include "ops/unary.h"

namespace kaiwu {
namespace cpu {
namespace {

enum class UnOp {
  kNeg, kAbs, kSign,  // numeric
  kSqrt, kExp, kLog, kReciprocal, kFloor, kCeil, kRound, kSin, kCos, kErf, kSigmoid, kTanh,
  kSoftplus, kSoftsign,
};

double OpCost(UnOp op) {
  switch (op) {
    case UnOp::kNeg: case UnOp::kAbs: case UnOp::kSign: case UnOp::kFloor: case UnOp::kCeil:
    case UnOp::kRound: case UnOp::kReciprocal: case UnOp::kSoftsign: case UnOp::kSqrt:
      return 1.0;
    default:
      return 12.0;
  }
}

template <typename T>
using ConstArr = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using Arr = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;

template <typename T>
void ApplyFloat(UnOp op, const T* px, T* py, int64_t n) {
  ConstArr<T> x(px, n);
  Arr<T> y(py, n);
  switch (op) {
    case UnOp::kNeg: y = -x; break;
    case UnOp::kAbs: y = x.abs(); break;
    case UnOp::kSign:
      for (int64_t i = 0; i < n; ++i)
        py[i] = px[i] > T(0) ? T(1) : (px[i] < T(0) ? T(-1) : px[i]);  // keeps 0 and NaN
      break;
    case UnOp::kSqrt:  // Eigen's vectorized sqrt returns NaN for +inf on AVX-512 builds
      for (int64_t i = 0; i < n; ++i) py[i] = std::sqrt(px[i]);
      break;
    case UnOp::kExp: y = x.exp(); break;
    case UnOp::kLog: y = x.log(); break;
    case UnOp::kReciprocal: y = x.inverse(); break;
    case UnOp::kFloor: y = x.floor(); break;
    case UnOp::kCeil: y = x.ceil(); break;
    case UnOp::kRound: y = x.rint(); break;  // halves to even, as ONNX asks
    case UnOp::kSin: y = x.sin(); break;
    case UnOp::kCos: y = x.cos(); break;
    case UnOp::kErf: y = x.erf(); break;
    case UnOp::kSigmoid: y = x.logistic(); break;
    case UnOp::kTanh: y = x.tanh(); break;
    case UnOp::kSoftplus:  // log(1 + e^x) without overflow
      y = x.max(T(0)) + (-x.abs()).exp().log1p();
      break;
    case UnOp::kSoftsign: y = x / (T(1) + x.abs()); break;
  }
}

// Negation that wraps (the most negative value maps to itself) instead of overflowing.
template <typename T>
inline T WrapNeg(T x) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(U(0) - static_cast<U>(x)));
}

template <typename T>
void ApplyInt(UnOp op, const T* x, T* y, int64_t n) {
  switch (op) {
    case UnOp::kNeg:
      for (int64_t i = 0; i < n; ++i) y[i] = WrapNeg(x[i]);
      break;
    case UnOp::kAbs:
      if constexpr (std::is_signed_v<T>) {
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0 ? WrapNeg(x[i]) : x[i];
      } else {
        for (int64_t i = 0; i < n; ++i) y[i] = x[i];
      }
      break;
    case UnOp::kSign:
      for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>((x[i] > 0) - (x[i] < 0));
      break;
    default:
      break;  // integer dtypes are registered for Neg, Abs and Sign only
  }
}

class UnaryKernel : public Kernel {
 public:
  explicit UnaryKernel(UnOp op) : op_(op) {}

  void Prepare(PrepareContext& ctx) override {
    dtype_ = ctx.in(0).dtype;
    size_ = ctx.in(0).size();
  }

  void Run(const KernelIO& io) const override {
    KAIWU_DISPATCH_NUMERIC(dtype_, {
      const T* x = static_cast<const T*>(io.inputs[0]);
      T* y = static_cast<T*>(io.outputs[0]);
      ParallelElements(io.pool, size_, OpCost(op_), [&](int64_t b, int64_t e) {
        if constexpr (std::is_floating_point_v<T>) {
          ApplyFloat<T>(op_, x + b, y + b, e - b);
        } else {
          ApplyInt<T>(op_, x + b, y + b, e - b);
        }
      });
    });
  }

 private:
  UnOp op_;
  DType dtype_ = DType::kUndefined;
  int64_t size_ = 0;
};

// IsNaN (detect_nan) and IsInf(detect_positive, detect_negative).
class IsSpecialKernel : public Kernel {
 public:
  explicit IsSpecialKernel(bool nan) : nan_(nan) {}

  void Prepare(PrepareContext& ctx) override {
    dtype_ = ctx.in(0).dtype;
    size_ = ctx.in(0).size();
    if (!nan_) {
      const IsInfParams& p = ctx.Params<IsInfParams>();
      pos_ = p.detect_positive;
      neg_ = p.detect_negative;
    }
  }

  void Run(const KernelIO& io) const override {
    KAIWU_DISPATCH_FLOAT(dtype_, {
      const T* x = static_cast<const T*>(io.inputs[0]);
      bool* y = static_cast<bool*>(io.outputs[0]);
      const T inf = std::numeric_limits<T>::infinity();
      const bool pos = pos_, neg = neg_;
      ParallelElements(io.pool, size_, 1.0, [&](int64_t b, int64_t e) {
        if (nan_) {
          for (int64_t i = b; i < e; ++i) y[i] = x[i] != x[i];
        } else {
          for (int64_t i = b; i < e; ++i) y[i] = (pos && x[i] == inf) || (neg && x[i] == -inf);
        }
      });
    });
  }

 private:
  bool nan_;
  bool pos_ = true, neg_ = true;
  DType dtype_ = DType::kUndefined;
  int64_t size_ = 0;
};

template <UnOp kOp>
std::unique_ptr<Kernel> MakeUnary(const Node&) {
  return std::make_unique<UnaryKernel>(kOp);
}

template <bool kNaN>
std::unique_ptr<Kernel> MakeIsSpecial(const Node&) {
  return std::make_unique<IsSpecialKernel>(kNaN);
}

}  // namespace

void RegisterUnaryKernels(KernelRegistry& r) {
  constexpr DType kF32 = DType::kFloat32, kF64 = DType::kFloat64;
  r.Register(OpId::kNeg, {kF32, kF64, DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64},
             &MakeUnary<UnOp::kNeg>);
  const std::initializer_list<DType> numeric = {kF32, kF64, DType::kInt8, DType::kUInt8,
                                                DType::kInt16, DType::kInt32, DType::kInt64};
  r.Register(OpId::kAbs, numeric, &MakeUnary<UnOp::kAbs>);
  r.Register(OpId::kSign, numeric, &MakeUnary<UnOp::kSign>);
  r.Register(OpId::kSqrt, {kF32, kF64}, &MakeUnary<UnOp::kSqrt>);
  r.Register(OpId::kExp, {kF32, kF64}, &MakeUnary<UnOp::kExp>);
  r.Register(OpId::kLog, {kF32, kF64}, &MakeUnary<UnOp::kLog>);
  r.Register(OpId::kReciprocal, {kF32, kF64}, &MakeUnary<UnOp::kReciprocal>);
  r.Register(OpId::kFloor, {kF32, kF64}, &MakeUnary<UnOp::kFloor>);
  r.Register(OpId::kCeil, {kF32, kF64}, &MakeUnary<UnOp::kCeil>);
  r.Register(OpId::kRound, {kF32, kF64}, &MakeUnary<UnOp::kRound>);
  r.Register(OpId::kSin, {kF32, kF64}, &MakeUnary<UnOp::kSin>);
  r.Register(OpId::kCos, {kF32, kF64}, &MakeUnary<UnOp::kCos>);
  r.Register(OpId::kErf, {kF32, kF64}, &MakeUnary<UnOp::kErf>);
  r.Register(OpId::kSigmoid, {kF32, kF64}, &MakeUnary<UnOp::kSigmoid>);
  r.Register(OpId::kTanh, {kF32, kF64}, &MakeUnary<UnOp::kTanh>);
  r.Register(OpId::kSoftplus, {kF32, kF64}, &MakeUnary<UnOp::kSoftplus>);
  r.Register(OpId::kSoftsign, {kF32, kF64}, &MakeUnary<UnOp::kSoftsign>);
  r.Register(OpId::kIsNaN, {kF32, kF64}, &MakeIsSpecial<true>);
  r.Register(OpId::kIsInf, {kF32, kF64}, &MakeIsSpecial<false>);
}

}  // namespace cpu
}  // namespace kaiwu
