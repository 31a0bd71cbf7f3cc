// FusedElementwise: see fused_elementwise.h. Work is split into blocks of
// kBlock elements of the output; each block is written once from x and then
// updated in place, op after op, while it sits in L1.
#include "backends/cpu/fused_elementwise.h"

#include <cmath>
#include <cstring>

#include <Eigen/Core>

#include "backends/cpu/elementwise_util.h"

namespace kaiwu {
namespace cpu {

namespace {

enum class FOp { kAdd, kSub, kMul, kDiv, kRelu, kSigmoid, kTanh, kExp, kNeg, kAbs, kSqrt, kClip, kLeakyRelu };

const std::pair<const char*, FOp> kOps[] = {
    {"Add", FOp::kAdd},   {"Sub", FOp::kSub},         {"Mul", FOp::kMul},   {"Div", FOp::kDiv},
    {"Relu", FOp::kRelu}, {"Sigmoid", FOp::kSigmoid}, {"Tanh", FOp::kTanh}, {"Exp", FOp::kExp},
    {"Neg", FOp::kNeg},   {"Abs", FOp::kAbs},         {"Sqrt", FOp::kSqrt}, {"Clip", FOp::kClip},
    {"LeakyRelu", FOp::kLeakyRelu},
};

bool Lookup(const std::string& name, FOp* op) {
  for (const auto& [n, o] : kOps)
    if (name == n) {
      *op = o;
      return true;
    }
  return false;
}

bool IsBinary(FOp op) { return op == FOp::kAdd || op == FOp::kSub || op == FOp::kMul || op == FOp::kDiv; }

constexpr int64_t kBlock = 1024;
using Arr = Eigen::Map<Eigen::ArrayXf>;
using ConstArr = Eigen::Map<const Eigen::ArrayXf>;

struct Step {
  FOp op;
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
      case FOp::kAdd: y += cs; break;
      case FOp::kSub:
        if (s.swapped) y = cs - y; else y -= cs;
        break;
      case FOp::kMul: y *= cs; break;
      default:
        if (s.swapped) y = cs / y; else y /= cs;
        break;
    }
    return;
  }
  ConstArr v(c, n);
  switch (s.op) {
    case FOp::kAdd: y += v; break;
    case FOp::kSub:
      if (s.swapped) y = v - y; else y -= v;
      break;
    case FOp::kMul: y *= v; break;
    default:
      if (s.swapped) y = v / y; else y /= v;
      break;
  }
}

void ApplyUnary(const Step& s, float* py, int64_t n) {
  Arr y(py, n);
  switch (s.op) {
    case FOp::kRelu: y = y.max(0.f); break;
    case FOp::kSigmoid: y = y.logistic(); break;
    case FOp::kTanh: y = y.tanh(); break;
    case FOp::kExp: y = y.exp(); break;
    case FOp::kNeg: y = -y; break;
    case FOp::kAbs: y = y.abs(); break;
    case FOp::kSqrt:  // not Eigen's fast-math sqrt: that one makes NaN of +inf
      for (int64_t i = 0; i < n; ++i) py[i] = std::sqrt(py[i]);
      break;
    case FOp::kClip:
      for (int64_t i = 0; i < n; ++i) py[i] = py[i] < s.p0 ? s.p0 : (py[i] > s.p1 ? s.p1 : py[i]);
      break;
    case FOp::kLeakyRelu:
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
    const Node& node = ctx.node;
    std::vector<std::string> ops = node.attrs.count("ops") ? node.attrs.at("ops").strings
                                                           : std::vector<std::string>{};
    std::vector<int64_t> operand = node.GetInts("operand"), swapped = node.GetInts("swapped");
    std::vector<float> params = node.GetFloats("params");
    if (ops.empty() || operand.size() != ops.size() || swapped.size() != ops.size() ||
        params.size() != 2 * ops.size())
      ctx.Error("attributes ops/operand/swapped/params disagree in length");
    for (int i = 0; i < ctx.num_inputs(); ++i) ctx.ExpectDType(i, {DType::kFloat32});
    std::vector<Shape> shapes;
    for (int i = 0; i < ctx.num_inputs(); ++i) shapes.push_back(ctx.in(i).shape);
    out_shape_ = BroadcastAll(ctx, shapes);
    total_ = NumElements(out_shape_);
    x_same_ = ctx.in(0).shape == out_shape_;
    x_plan_ = MakeBroadcastPlan(ctx, {ctx.in(0).shape}, out_shape_);
    steps_.clear();
    for (size_t k = 0; k < ops.size(); ++k) {
      Step s;
      if (!Lookup(ops[k], &s.op)) ctx.Error("unsupported op '", ops[k], "' in the chain");
      s.operand = static_cast<int>(operand[k]);
      s.swapped = swapped[k] != 0;
      s.p0 = params[2 * k];
      s.p1 = params[2 * k + 1];
      if (IsBinary(s.op)) {
        if (s.operand < 1 || s.operand >= ctx.num_inputs())
          ctx.Error("op ", k, " (", ops[k], ") names input ", s.operand, ", which does not exist");
        const Shape& cs = ctx.in(s.operand).shape;
        s.access = NumElements(cs) == 1 ? Step::Access::kScalar
                   : cs == out_shape_   ? Step::Access::kContiguous
                                        : Step::Access::kGather;
        s.plan = MakeBroadcastPlan(ctx, {cs}, out_shape_);
      }
      steps_.push_back(s);
    }
    ctx.SetOutput(0, DType::kFloat32, out_shape_);
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
          if (!IsBinary(s.op)) {
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

bool FusedElementwiseSupports(const std::string& op_type) {
  FOp op;
  return Lookup(op_type, &op);
}

void RegisterFusedKernels(KernelRegistry& r) {
  r.Register(OpId::kFusedElementwise, kAnyDType, &MakeKernel<FusedElementwiseKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
