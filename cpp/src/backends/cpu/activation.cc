#include "backends/cpu/activation.h"

#include <Eigen/Core>
#include <algorithm>

#include "kaiwu/status.h"

namespace kaiwu {
namespace cpu {

Activation Activation::FromNode(const Node& node) {
  Activation a;
  if (!node.Has("_kaiwu_act")) return a;
  const std::string name = node.GetString("_kaiwu_act", "");
  std::vector<float> p = node.GetFloats("_kaiwu_act_params", {0.f, 0.f});
  if (p.size() == 2) {
    a.alpha = p[0];
    a.beta = p[1];
  }
  if (name == "Relu") a.kind = Kind::kRelu;
  else if (name == "LeakyRelu") a.kind = Kind::kLeakyRelu;
  else if (name == "Tanh") a.kind = Kind::kTanh;
  else if (name == "Sigmoid") a.kind = Kind::kSigmoid;
  else if (name == "Clip") a.kind = Kind::kClip;
  else if (name == "HardSigmoid") a.kind = Kind::kHardSigmoid;
  else if (name == "HardSwish") a.kind = Kind::kHardSwish;
  else Fail(StatusCode::kInternal, node.Describe(), ": unknown fused activation '", name, "'");
  return a;
}

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
