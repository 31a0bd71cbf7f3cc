// BatchNormalization (inference) and InstanceNormalization; LayerNormalization
// lives in norm_layer.cc.
#include <Eigen/Core>
#include <cmath>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/norm_util.h"

namespace kaiwu {
namespace cpu {
namespace {

using ArrayMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf>;

// Checks X [N, C, ...] float32 and that inputs first..last are float32 [C].
void CheckChannelInputs(const PrepareContext& ctx, int first, int last) {
  ctx.ExpectDType(0, {DType::kFloat32});
  const Shape& x = ctx.in(0).shape;
  if (x.size() < 2) ctx.Error("X must have rank >= 2, got ", ShapeToString(x));
  for (int i = first; i <= last; ++i) {
    ctx.ExpectDType(i, {DType::kFloat32});
    if (ctx.in(i).shape != Shape{x[1]})
      ctx.Error("input ", i, " must have shape [", x[1], "], got ", ShapeToString(ctx.in(i).shape));
  }
}

// Y = scale * (X - mean) / sqrt(var + epsilon) + B, per channel.
class BatchNormKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    if (ctx.node.GetInt("training_mode", 0) != 0)
      ctx.Error("training_mode=1 is not supported (inference only)");
    for (size_t i = 1; i < ctx.node.outputs.size(); ++i)
      if (ctx.node.outputs[i] >= 0) ctx.Error("only the Y output is supported (inference only)");
    if (ctx.num_inputs() != 5) ctx.Error("expects 5 inputs, got ", ctx.num_inputs());
    CheckChannelInputs(ctx, 1, 4);
    const Shape& x = ctx.in(0).shape;
    epsilon_ = ctx.node.GetFloat("epsilon", 1e-5f);
    c_ = x[1];
    planes_ = x[0] * c_;
    plane_size_ = NumElements(Shape(x.begin() + 2, x.end()));
    ctx.SetOutput(0, DType::kFloat32, x);
    ctx.scratch_bytes = 2 * c_ * sizeof(float);
  }

  void Run(const KernelIO& io) const override {
    const float* x = static_cast<const float*>(io.inputs[0]);
    const float* scale = static_cast<const float*>(io.inputs[1]);
    const float* bias = static_cast<const float*>(io.inputs[2]);
    const float* mean = static_cast<const float*>(io.inputs[3]);
    const float* var = static_cast<const float*>(io.inputs[4]);
    float* y = static_cast<float*>(io.outputs[0]);
    float* a = static_cast<float*>(io.scratch);
    float* b = a + c_;
    for (int64_t c = 0; c < c_; ++c) {
      a[c] = scale[c] / std::sqrt(var[c] + epsilon_);
      b[c] = bias[c] - mean[c] * a[c];
    }
    const int64_t s = plane_size_;
    io.pool->ParallelFor(planes_, 2.0 * s, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const float av = a[p % c_], bv = b[p % c_];
        ArrayMap(y + p * s, s) = ConstArrayMap(x + p * s, s) * av + bv;
      }
    });
  }

 private:
  float epsilon_ = 1e-5f;
  int64_t c_ = 0, planes_ = 0, plane_size_ = 0;
};

// Y = scale * (X - mean) / sqrt(var + epsilon) + B with statistics per (n, c) plane.
class InstanceNormKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    if (ctx.num_inputs() != 3) ctx.Error("expects 3 inputs, got ", ctx.num_inputs());
    CheckChannelInputs(ctx, 1, 2);
    const Shape& x = ctx.in(0).shape;
    if (x.size() < 3) ctx.Error("X must have rank >= 3, got ", ShapeToString(x));
    epsilon_ = ctx.node.GetFloat("epsilon", 1e-5f);
    c_ = x[1];
    planes_ = x[0] * c_;
    plane_size_ = NumElements(Shape(x.begin() + 2, x.end()));
    ctx.SetOutput(0, DType::kFloat32, x);
  }

  void Run(const KernelIO& io) const override {
    const float* x = static_cast<const float*>(io.inputs[0]);
    const float* scale = static_cast<const float*>(io.inputs[1]);
    const float* bias = static_cast<const float*>(io.inputs[2]);
    float* y = static_cast<float*>(io.outputs[0]);
    const int64_t s = plane_size_;
    if (s == 0) return;
    io.pool->ParallelFor(planes_, 6.0 * s, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        RowStats st = ComputeRowStats(x + p * s, s, epsilon_);
        const float a = scale[p % c_] * st.inv_std;
        const float b = bias[p % c_] - st.mean * a;
        ArrayMap(y + p * s, s) = ConstArrayMap(x + p * s, s) * a + b;
      }
    });
  }

 private:
  float epsilon_ = 1e-5f;
  int64_t c_ = 0, planes_ = 0, plane_size_ = 0;
};

}  // namespace

void RegisterNormKernels(KernelRegistry& r) {
  r.Register(OpId::kBatchNormalization, kAnyDType, &MakeKernel<BatchNormKernel>);
  r.Register(OpId::kInstanceNormalization, kAnyDType, &MakeKernel<InstanceNormKernel>);
  RegisterLayerNormKernel(r);
}

}  // namespace cpu
}  // namespace kaiwu
