// LayerNormalization: normalises over the dims from `axis` on, then applies
// Scale and the optional B (broadcast to X.shape[axis:]), and writes the
// optional Mean and InvStdDev outputs (shapes: ops/norm.cc).
#include <Eigen/Core>
#include <algorithm>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/norm_util.h"
#include "backends/linalg_index.h"
#include "ops/norm.h"

namespace kaiwu {
namespace cpu {
namespace {

using ArrayMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf>;

class LayerNormKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const LayerNormParams& p = ctx.Params<LayerNormParams>();
    const Shape& x = ctx.in(0).shape;
    epsilon_ = p.epsilon;
    outer_ = NumElements(Shape(x.begin(), x.begin() + p.axis));
    inner_ = NumElements(p.norm_shape);
    scale_map_ = IndexMap(p.scale_shape, p.norm_shape);
    has_bias_ = p.has_bias;
    bias_map_.clear();
    if (has_bias_) bias_map_ = IndexMap(p.bias_shape, p.norm_shape);
    num_outputs_ = std::min<int>(3, static_cast<int>(ctx.outputs.size()));
  }

  void Run(const KernelIO& io) const override {
    const float* x = static_cast<const float*>(io.inputs[0]);
    const float* scale = static_cast<const float*>(io.inputs[1]);
    const float* bias = has_bias_ ? static_cast<const float*>(io.inputs[2]) : nullptr;
    float* y = static_cast<float*>(io.outputs[0]);
    float* mean_out = OptionalOutput(io, 1);
    float* inv_out = OptionalOutput(io, 2);
    const int64_t n = inner_;
    if (n == 0) return;
    io.pool->ParallelFor(outer_, 8.0 * n, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        RowStats st = ComputeRowStats(x + r * n, n, epsilon_);
        if (mean_out) mean_out[r] = st.mean;
        if (inv_out) inv_out[r] = st.inv_std;
        ArrayMap out(y + r * n, n);
        ConstArrayMap in(x + r * n, n);
        if (scale_map_.empty()) {
          out = (in - st.mean) * st.inv_std * ConstArrayMap(scale, n);
        } else {
          for (int64_t j = 0; j < n; ++j)
            out[j] = (in[j] - st.mean) * st.inv_std * scale[scale_map_[j]];
        }
        if (!bias) continue;
        if (bias_map_.empty()) {
          out += ConstArrayMap(bias, n);
        } else {
          for (int64_t j = 0; j < n; ++j) out[j] += bias[bias_map_[j]];
        }
      }
    });
  }

 private:
  // Output i if the kernel has it and the node wants it, else nullptr.
  float* OptionalOutput(const KernelIO& io, int i) const {
    return i < num_outputs_ ? static_cast<float*>(io.outputs[i]) : nullptr;
  }

  // Per element of the normalised shape, the index into Scale or B of shape
  // `s` (which broadcasts to it), or an empty map when `s` already has exactly
  // that many elements.
  static std::vector<int64_t> IndexMap(const Shape& s, const Shape& norm_shape) {
    if (NumElements(s) == NumElements(norm_shape)) return {};
    std::vector<int64_t> strides = BroadcastStrides(s, norm_shape);
    std::vector<int64_t> map(NumElements(norm_shape));
    for (int64_t f = 0; f < static_cast<int64_t>(map.size()); ++f) {
      int64_t rem = f, idx = 0;
      for (int d = static_cast<int>(norm_shape.size()) - 1; d >= 0; --d) {
        idx += (rem % norm_shape[d]) * strides[d];
        rem /= norm_shape[d];
      }
      map[f] = idx;
    }
    return map;
  }

  float epsilon_ = 1e-5f;
  int64_t outer_ = 0, inner_ = 0;
  bool has_bias_ = false;
  int num_outputs_ = 1;
  std::vector<int64_t> scale_map_, bias_map_;
};

}  // namespace

void RegisterLayerNormKernel(KernelRegistry& r) {
  r.Register(OpId::kLayerNormalization, DType::kFloat32, &MakeKernel<LayerNormKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
