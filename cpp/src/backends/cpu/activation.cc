#include "backends/cpu/activation.h"

#include <Eigen/Core>
#include <algorithm>

namespace kaiwu {
namespace cpu {

void Activation::Apply(float* x, int64_t n, float bias) const {
  Eigen::Map<Eigen::ArrayXf> v(x, n);
  if (bias != 0.f) v += bias;
  switch (kind) {
    case Kind::kNone: break;
    case Kind::kRelu: v = v.max(0.f); break;
    case Kind::kLeakyRelu: v = (v >= 0.f).select(v, v * alpha); break;
    case Kind::kTanh: v = v.tanh(); break;
    case Kind::kSigmoid: v = v.logistic(); break;
    case Kind::kClip: v = v.max(alpha).min(beta); break;
    case Kind::kHardSigmoid: v = (v * alpha + beta).max(0.f).min(1.f); break;
    case Kind::kHardSwish: v = v * (v * (1.f / 6.f) + 0.5f).max(0.f).min(1.f); break;
  }
}

}  // namespace cpu
}  // namespace kaiwu
