// FusedElementwise (domain "kaiwu") on CUDA: the chain of ops that
// ops/binary.h describes, applied per element in registers, on float32 or on
// float16/bfloat16 tensors (loaded as float, the whole chain in float, one
// rounding when stored). A launch runs up
// to kFusedSteps ops; longer chains continue in place on the output in
// further launches. Each binary op's operand has its own broadcast index map
// (slot s + 1 for step s; slot 0 is the chain's input).
#include <vector>

#include "backends/cuda/elementwise_util.cuh"
#include "backends/cuda/half_util.cuh"
#include "ops/binary.h"

namespace kaiwu {
namespace cuda {
namespace eltwise {
namespace {

constexpr int kFusedSteps = 16;
constexpr int kSlots = kFusedSteps + 1;

struct FusedStep {
  FusedOp op;
  bool swapped;  // the operand is the left one: c - v, c / v
  float p0, p1;  // Clip bounds; LeakyRelu alpha
};

// What one launch runs; built at Prepare.
struct FusedProgram {
  int num_steps = 0;
  FusedStep steps[kFusedSteps];
  ElementIndexer<kSlots> ix;
};

// The launch's data pointers, per slot; set in Run.
template <typename T>
struct FusedOperands {
  const T* slot[kSlots];
};

static_assert(sizeof(FusedProgram) + sizeof(FusedOperands<float>) + 64 < 4096,
              "kernel parameters stay under 4 KiB");

__device__ inline float ApplyStep(const FusedStep& s, float v, float c) {
  switch (s.op) {
    case FusedOp::kAdd: return v + c;
    case FusedOp::kSub: return s.swapped ? c - v : v - c;
    case FusedOp::kMul: return v * c;
    case FusedOp::kDiv: return s.swapped ? c / v : v / c;
    case FusedOp::kRelu: return v < 0.f ? 0.f : v;
    case FusedOp::kSigmoid: return 1.f / (1.f + expf(-v));
    case FusedOp::kTanh: return tanhf(v);
    case FusedOp::kExp: return expf(v);
    case FusedOp::kNeg: return -v;
    case FusedOp::kAbs: return fabsf(v);
    case FusedOp::kSqrt: return sqrtf(v);
    case FusedOp::kClip: return v < s.p0 ? s.p0 : (v > s.p1 ? s.p1 : v);
    case FusedOp::kLeakyRelu: return v < 0.f ? s.p0 * v : v;
  }
  return v;
}

template <typename T>
__global__ void FusedKernel(FusedProgram p, FusedOperands<T> in, int64_t n, T* y) {
  KAIWU_CUDA_LOOP(i, n) {
    int64_t off[kSlots];
    p.ix.Offsets(i, off);
    float v = Load(in.slot[0][off[0]]);
#pragma unroll
    for (int s = 0; s < kFusedSteps; ++s) {
      if (s >= p.num_steps) break;
      const float c = IsBinaryFusedOp(p.steps[s].op) ? Load(in.slot[s + 1][off[s + 1]]) : 0.f;
      v = ApplyStep(p.steps[s], v, c);
    }
    y[i] = Store<T>(v);
  }
}

class FusedElementwiseKernel : public CudaKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const std::vector<FusedElementwiseParams::Step>& chain =
        ctx.Params<FusedElementwiseParams>().steps;
    const Shape& out = ctx.outputs[0].shape;
    dtype_ = ctx.outputs[0].dtype;
    size_ = NumElements(out);
    programs_.clear();
    operand_.clear();
    for (size_t first = 0; first < chain.size(); first += kFusedSteps) {
      FusedProgram p;
      // Slot 0: the chain's input first, then the output that earlier launches wrote.
      std::vector<Shape> shapes = {first == 0 ? ctx.in(0).shape : out};
      for (size_t k = first; k < chain.size() && p.num_steps < kFusedSteps; ++k) {
        FusedStep& s = p.steps[p.num_steps++];
        s.op = chain[k].op;
        s.swapped = chain[k].swapped;
        s.p0 = chain[k].p0;
        s.p1 = chain[k].p1;
        const int in = IsBinaryFusedOp(s.op) ? chain[k].operand : -1;
        operand_.push_back(in);
        shapes.push_back(in >= 0 ? ctx.in(in).shape : Shape{});  // unused slots: one element
      }
      p.ix = MakeIndexer<kSlots>(ctx, shapes, out);
      programs_.push_back(p);
    }
  }

  void Run(const KernelIO& io) const override {
    if (size_ <= 0) return;
    WithFloatType(dtype_, [&](auto t) { RunTyped<decltype(t)>(io); });
  }

 private:
  template <typename T>
  void RunTyped(const KernelIO& io) const {
    T* y = static_cast<T*>(io.outputs[0]);
    for (size_t l = 0; l < programs_.size(); ++l) {
      FusedOperands<T> in{};
      in.slot[0] = l == 0 ? static_cast<const T*>(io.inputs[0]) : y;
      for (int s = 0; s < programs_[l].num_steps; ++s) {
        const int k = operand_[l * kFusedSteps + s];
        in.slot[s + 1] = k >= 0 ? static_cast<const T*>(io.inputs[k]) : nullptr;
      }
      FusedKernel<T><<<GridFor(size_), kBlock, 0, Dev(io).stream>>>(programs_[l], in, size_, y);
      CheckLaunch("FusedElementwise kernel");
    }
  }

  DType dtype_ = DType::kFloat32;
  int64_t size_ = 0;
  std::vector<FusedProgram> programs_;  // one per launch
  std::vector<int> operand_;            // per step: the input its operand is, or -1
};

}  // namespace

void RegisterFusedKernels(KernelRegistry& r) {
  r.Register(OpId::kFusedElementwise, {DType::kFloat32, DType::kFloat16, DType::kBFloat16},
             &MakeKernel<FusedElementwiseKernel>);
}

}  // namespace eltwise
}  // namespace cuda
}  // namespace kaiwu
