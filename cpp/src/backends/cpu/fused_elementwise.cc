// FusedElementwise (the chain ops/binary.h describes). Work is split into
// blocks of kBlock elements of the output; each block is written once from x
// and then updated in place, op after op, while it sits in L1.
#include <cmath>
#include <cstring>

#include <Eigen/Core>

#include "backends/cpu/elementwise_util.h"
#include "ops/binary.h"

namespace kaiwu {
namespace cpu {

namespace {

constexpr int64_t kBlock = 1024;
using Arr = Eigen::Map<Eigen::ArrayXf>;
using ConstArr = Eigen::Map<const Eigen::ArrayXf>;

struct Step {
  FusedOp op;
  int operand = 0;       // input index, 0 for unary
  bool swapped = false;  // operand on the left
  float p0 = 0, p1 = 0;
  enum class Access { kScalar, kContiguous, kGather } access = Access::kScalar;
  BroadcastPlan plan;    // operand -> output, for kGather
};

// y = y op c, c given per element (c) or as one number (cs when c == nullptr).
void ApplyBinary(const Step& s, float* py, const float* c, float cs, int64_t n) {
  Arr y(py, n);
  if (c == nullptr) {
    switch (s.op) {
      case FusedOp::kAdd: y += cs; break;
      case FusedOp::kSub:
        if (s.swapped) y = cs - y; else y -= cs;
        break;
      case FusedOp::kMul: y *= cs; break;
      default:
        if (s.swapped) y = cs / y; else y /= cs;
        break;
    }
    return;
  }
  ConstArr v(c, n);
  switch (s.op) {
    case FusedOp::kAdd: y += v; break;
    case FusedOp::kSub:
      if (s.swapped) y = v - y; else y -= v;
      break;
    case FusedOp::kMul: y *= v; break;
    default:
      if (s.swapped) y = v / y; else y /= v;
      break;
  }
}

void ApplyUnary(const Step& s, float* py, int64_t n) {
  Arr y(py, n);
  switch (s.op) {
    case FusedOp::kRelu: y = y.max(0.f); break;
    case FusedOp::kSigmoid: y = y.logistic(); break;
    case FusedOp::kTanh: y = y.tanh(); break;
    case FusedOp::kExp: y = y.exp(); break;
    case FusedOp::kNeg: y = -y; break;
    case FusedOp::kAbs: y = y.abs(); break;
    case FusedOp::kSqrt:  // not Eigen's fast-math sqrt: that one makes NaN of +inf
      for (int64_t i = 0; i < n; ++i) py[i] = std::sqrt(py[i]);
      break;
    case FusedOp::kClip:
      for (int64_t i = 0; i < n; ++i) py[i] = py[i] < s.p0 ? s.p0 : (py[i] > s.p1 ? s.p1 : py[i]);
      break;
    case FusedOp::kLeakyRelu:
      for (int64_t i = 0; i < n; ++i) py[i] = py[i] < 0.f ? s.p0 * py[i] : py[i];
      break;
    default: break;
  }
}

// Copies `src` broadcast by `plan` into dst for output elements [begin, end).
void Gather(const BroadcastPlan& plan, const float* src, int64_t begin, int64_t end, float* dst) {
  ForEachRun<1>(plan, begin, end, [&](int64_t o, const int64_t* off, int64_t n) {
    float* d = dst + (o - begin);
    if (plan.inner_stride(0) == 0) {
      std::fill(d, d + n, src[off[0]]);
    } else {
      std::memcpy(d, src + off[0], static_cast<size_t>(n) * sizeof(float));
    }
  });
}

class FusedElementwiseKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const FusedElementwiseParams& params = ctx.Params<FusedElementwiseParams>();
    out_shape_ = ctx.outputs[0].shape;
    total_ = NumElements(out_shape_);
    x_same_ = ctx.in(0).shape == out_shape_;
    x_plan_ = MakeBroadcastPlan(ctx, {ctx.in(0).shape}, out_shape_);
    steps_.clear();
    for (const FusedElementwiseParams::Step& p : params.steps) {
      Step s;
      s.op = p.op;
      s.operand = p.operand;
      s.swapped = p.swapped;
      s.p0 = p.p0;
      s.p1 = p.p1;
      if (IsBinaryFusedOp(s.op)) {
        const Shape& cs = ctx.in(s.operand).shape;
        s.access = NumElements(cs) == 1 ? Step::Access::kScalar
                   : cs == out_shape_   ? Step::Access::kContiguous
                                        : Step::Access::kGather;
        s.plan = MakeBroadcastPlan(ctx, {cs}, out_shape_);
      }
      steps_.push_back(s);
    }
  }

  void Run(const KernelIO& io) const override {
    const float* x = static_cast<const float*>(io.inputs[0]);
    float* y = static_cast<float*>(io.outputs[0]);
    const double cost = 2.0 * static_cast<double>(steps_.size());
    ParallelElements(io.pool, total_, cost, [&](int64_t begin, int64_t end) {
      float buf[kBlock];
      for (int64_t b = begin; b < end; b += kBlock) {
        const int64_t n = std::min(kBlock, end - b);
        float* py = y + b;
        if (x_same_) {
          if (py != x + b) std::memcpy(py, x + b, static_cast<size_t>(n) * sizeof(float));
        } else {
          Gather(x_plan_, x, b, b + n, py);
        }
        for (const Step& s : steps_) {
          if (!IsBinaryFusedOp(s.op)) {
            ApplyUnary(s, py, n);
            continue;
          }
          const float* c = static_cast<const float*>(io.inputs[s.operand]);
          if (s.access == Step::Access::kScalar) {
            ApplyBinary(s, py, nullptr, c[0], n);
          } else if (s.access == Step::Access::kContiguous) {
            ApplyBinary(s, py, c + b, 0.f, n);
          } else {
            Gather(s.plan, c, b, b + n, buf);
            ApplyBinary(s, py, buf, 0.f, n);
          }
        }
      }
    });
  }

 private:
  std::vector<Step> steps_;
  Shape out_shape_;
  int64_t total_ = 0;
  bool x_same_ = true;
  BroadcastPlan x_plan_;
};

}  // namespace

void RegisterFusedKernels(KernelRegistry& r) {
  r.Register(OpId::kFusedElementwise, DType::kFloat32, &MakeKernel<FusedElementwiseKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
