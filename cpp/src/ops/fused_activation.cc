#include "ops/fused_activation.h"

#include <string>
#include <vector>

#include "kaiwu/status.h"

namespace kaiwu {

FusedActivation FusedActivation::FromNode(const Node& node) {
  FusedActivation a;
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

}  // namespace kaiwu
