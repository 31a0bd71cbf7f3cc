// Act(Reshape(P(..))) -> Reshape(Act(P(..))) for P a Conv/Gemm/MatMul without a
// fused activation and Act one that fuse_activation can take (Relu, LeakyRelu,
// Tanh, Sigmoid, HardSigmoid, HardSwish, Clip). An elementwise op commutes with
// a Reshape, and afterwards the activation sits right on the producer, where
// fuse_activation applies it as the output is written. Made for the Gemm that
// fuse_matmul_add wraps in Reshapes for inputs of rank > 2.
#include <set>

#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

namespace {
const std::set<std::string> kActs = {"Relu", "LeakyRelu", "Tanh", "Sigmoid",
                                     "HardSigmoid", "HardSwish", "Clip"};
const std::set<std::string> kProducers = {"Conv", "Gemm", "MatMul"};
}  // namespace

int HoistActivationAboveReshape(Graph* g) {
  int fired = 0;
  const std::vector<int> producer = Producers(*g);
  const std::vector<int> uses = UseCounts(*g);
  for (Node& act : g->nodes) {
    if (!kActs.count(act.op_type) || !act.domain.empty() || !act.HasInput(0) || act.outputs.size() != 1)
      continue;
    const int r = act.inputs[0];
    const Node* reshape = SoleProducer(*g, producer, uses, r, "Reshape");
    if (!reshape || !reshape->HasInput(0)) continue;
    const int z = reshape->inputs[0];
    if (producer[z] < 0 || uses[z] != 1 || IsGraphOutput(*g, z)) continue;
    const Node& p = g->nodes[producer[z]];
    if (!kProducers.count(p.op_type) || !p.domain.empty() || p.Has("_kaiwu_act")) continue;
    Node& rs = g->nodes[producer[r]];
    const int out = act.outputs[0];
    // z -> act -> r -> reshape -> out
    act.inputs[0] = z;
    act.outputs[0] = r;
    rs.inputs[0] = r;
    rs.outputs[0] = out;
    ForgetShape(g, r);  // now holds the un-reshaped layout
    ++fired;
  }
  if (fired) g->Verify();
  return fired;
}

}  // namespace kaiwu
