// Activations with attributes: Relu LeakyRelu Elu Selu Celu HardSigmoid
// HardSwish Gelu ThresholdedRelu Mish, and Clip (bounds as optional inputs).
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

enum class ActOp {
  kRelu, kLeakyRelu, kElu, kSelu, kCelu, kHardSigmoid, kHardSwish, kGelu, kGeluTanh,
  kThresholdedRelu, kMish,
};

template <typename T>
using ConstArr = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using Arr = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;

struct ActParams {
  double alpha = 0, beta = 0, gamma = 0;
};

template <typename T>
void ApplyActivation(ActOp op, const ActParams& p, const T* px, T* py, int64_t n) {
  const T alpha = static_cast<T>(p.alpha), beta = static_cast<T>(p.beta),
          gamma = static_cast<T>(p.gamma);
  if constexpr (!std::is_floating_point_v<T>) {
    for (int64_t i = 0; i < n; ++i) py[i] = px[i] > T(0) ? px[i] : T(0);  // Relu only
    (void)op, (void)alpha, (void)beta, (void)gamma;
  } else {
    ConstArr<T> x(px, n);
    Arr<T> y(py, n);
    switch (op) {
      case ActOp::kRelu: y = x.max(T(0)); break;
      case ActOp::kLeakyRelu:
        for (int64_t i = 0; i < n; ++i) py[i] = px[i] < T(0) ? alpha * px[i] : px[i];
        break;
      case ActOp::kElu:
        y = (x < T(0)).select(alpha * (x.exp() - T(1)), x);
        break;
      case ActOp::kSelu:
        y = gamma * (x <= T(0)).select(alpha * (x.exp() - T(1)), x);
        break;
      case ActOp::kCelu:
        y = x.max(T(0)) + (alpha * ((x / alpha).exp() - T(1))).min(T(0));
        break;
      case ActOp::kHardSigmoid:
        for (int64_t i = 0; i < n; ++i)
          py[i] = std::min(T(1), std::max(T(0), alpha * px[i] + beta));
        break;
      case ActOp::kHardSwish:
        for (int64_t i = 0; i < n; ++i)
          py[i] = px[i] * std::min(T(1), std::max(T(0), px[i] * T(1.0 / 6.0) + T(0.5)));
        break;
      case ActOp::kGelu:
        y = T(0.5) * x * (T(1) + (x * T(M_SQRT1_2)).erf());
        break;
      case ActOp::kGeluTanh: {
        const T k = static_cast<T>(std::sqrt(2.0 / M_PI));
        y = T(0.5) * x * (T(1) + (k * (x + T(0.044715) * x * x * x)).tanh());
        break;
      }
      case ActOp::kThresholdedRelu:
        for (int64_t i = 0; i < n; ++i) py[i] = px[i] > alpha ? px[i] : T(0);
        break;
      case ActOp::kMish:  // x * tanh(softplus(x))
        y = x * (x.max(T(0)) + (-x.abs()).exp().log1p()).tanh();
        break;
    }
  }
}

class ActivationKernel : public Kernel {
 public:
  explicit ActivationKernel(ActOp op) : op_(op) {}

  void Prepare(PrepareContext& ctx) override {
    // Relu, HardSwish and Mish have no attributes.
    if (const auto* p = dynamic_cast<const ActivationParams*>(ctx.params.get())) {
      params_.alpha = p->alpha;
      params_.beta = p->beta;
      params_.gamma = p->gamma;
      if (op_ == ActOp::kGelu && p->gelu_tanh) op_ = ActOp::kGeluTanh;
    }
    dtype_ = ctx.in(0).dtype;
    size_ = ctx.in(0).size();
  }

  void Run(const KernelIO& io) const override {
    const double cost = op_ == ActOp::kRelu || op_ == ActOp::kLeakyRelu ||
                                op_ == ActOp::kHardSigmoid || op_ == ActOp::kHardSwish ||
                                op_ == ActOp::kThresholdedRelu
                            ? 1.0
                            : 12.0;
    KAIWU_DISPATCH_NUMERIC(dtype_, {
      const T* x = static_cast<const T*>(io.inputs[0]);
      T* y = static_cast<T*>(io.outputs[0]);
      ParallelElements(io.pool, size_, cost, [&](int64_t b, int64_t e) {
        ApplyActivation<T>(op_, params_, x + b, y + b, e - b);
      });
    });
  }

 private:
  ActOp op_;
  ActParams params_;
  DType dtype_ = DType::kUndefined;
  int64_t size_ = 0;
};

// Clip: opset >= 11 takes min and max as optional one-element inputs, read in
// Run; older opsets carry them as float attributes.
class ClipKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const ClipParams& p = ctx.Params<ClipParams>();
    dtype_ = ctx.in(0).dtype;
    has_bound_[0] = p.has_bound[0];
    has_bound_[1] = p.has_bound[1];
    attr_bounds_ = p.attr_bounds;
    attr_min_ = p.attr_min;
    attr_max_ = p.attr_max;
    size_ = ctx.in(0).size();
  }

  void Run(const KernelIO& io) const override {
    KAIWU_DISPATCH_NUMERIC(dtype_, {
      T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
      if (attr_bounds_) {
        lo = static_cast<T>(attr_min_);
        hi = static_cast<T>(attr_max_);
      }
      if (has_bound_[0] && io.inputs[1]) lo = *static_cast<const T*>(io.inputs[1]);
      if (has_bound_[1] && io.inputs[2]) hi = *static_cast<const T*>(io.inputs[2]);
      const T* x = static_cast<const T*>(io.inputs[0]);
      T* y = static_cast<T*>(io.outputs[0]);
      // min > max gives max everywhere, as in ONNX's reference.
      ParallelElements(io.pool, size_, 1.0, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          T v = x[i] < lo ? lo : x[i];
          y[i] = v > hi ? hi : v;
        }
      });
    });
  }

 private:
  DType dtype_ = DType::kUndefined;
  bool has_bound_[2] = {false, false};
  bool attr_bounds_ = false;
  float attr_min_ = 0, attr_max_ = 0;
  int64_t size_ = 0;
};

template <ActOp kOp>
std::unique_ptr<Kernel> MakeActivation(const Node&) {
  return std::make_unique<ActivationKernel>(kOp);
}

}  // namespace

void RegisterActivationKernels(KernelRegistry& r) {
  constexpr DType kF32 = DType::kFloat32, kF64 = DType::kFloat64;
  r.Register(OpId::kRelu, {kF32, kF64, DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64},
             &MakeActivation<ActOp::kRelu>);
  r.Register(OpId::kLeakyRelu, {kF32, kF64}, &MakeActivation<ActOp::kLeakyRelu>);
  r.Register(OpId::kElu, {kF32, kF64}, &MakeActivation<ActOp::kElu>);
  r.Register(OpId::kSelu, {kF32, kF64}, &MakeActivation<ActOp::kSelu>);
  r.Register(OpId::kCelu, {kF32, kF64}, &MakeActivation<ActOp::kCelu>);
  r.Register(OpId::kHardSigmoid, {kF32, kF64}, &MakeActivation<ActOp::kHardSigmoid>);
  r.Register(OpId::kHardSwish, {kF32, kF64}, &MakeActivation<ActOp::kHardSwish>);
  r.Register(OpId::kGelu, {kF32, kF64}, &MakeActivation<ActOp::kGelu>);
  r.Register(OpId::kThresholdedRelu, {kF32, kF64}, &MakeActivation<ActOp::kThresholdedRelu>);
  r.Register(OpId::kMish, {kF32, kF64}, &MakeActivation<ActOp::kMish>);
  r.Register(OpId::kClip,
             {kF32, kF64, DType::kInt8, DType::kUInt8, DType::kInt16, DType::kInt32,
              DType::kInt64},
             &MakeKernel<ClipKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
