// BatchNormalization (inference) and InstanceNormalization; LayerNormalization
// lives in norm_layer.cc.
#include <Eigen/Core>
#include <cmath>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/norm_util.h"
#include "ops/norm.h"

namespace kaiwu {
namespace cpu {
namespace {

using ArrayMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf>;

// Y = scale * (X - mean) / sqrt(var + epsilon) + B, per channel.
class BatchNormKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const Shape& x = ctx.in(0).shape;
    epsilon_ = ctx.Params<NormParams>().epsilon;
    c_ = x[1];
    planes_ = x[0] * c_;
    plane_size_ = NumElements(Shape(x.begin() + 2, x.end()));
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
    const Shape& x = ctx.in(0).shape;
    epsilon_ = ctx.Params<NormParams>().epsilon;
    c_ = x[1];
    planes_ = x[0] * c_;
    plane_size_ = NumElements(Shape(x.begin() + 2, x.end()));
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
  r.Register(OpId::kBatchNormalization, DType::kFloat32, &MakeKernel<BatchNormKernel>);
  r.Register(OpId::kInstanceNormalization, DType::kFloat32, &MakeKernel<InstanceNormKernel>);
  RegisterLayerNormKernel(r);
}

}  // namespace cpu
}  // namespace kaiwu
