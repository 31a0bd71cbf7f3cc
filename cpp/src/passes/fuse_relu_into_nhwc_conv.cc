// CPU sessions, after the layout pass (OptimizeForCpu): Relu(x) read only by
// an NhwcConv's input becomes the conv's "_kaiwu_input_relu" attribute: the
// conv applies max(x, 0) while it copies each image into its zero-bordered
// buffer, a pass over memory it makes anyway for a padded conv, so the Relu
// costs nothing of its own (the pre-activation residual blocks of IMPALA have
// one before every first conv; x itself stays for the residual Add).
#include <vector>

#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

int FuseReluIntoNhwcConv(Graph* g) {
  const std::vector<int> producer = Producers(*g);
  const std::vector<int> uses = UseCounts(*g);
  int fired = 0;
  for (Node& conv : g->nodes) {
    if (conv.op_type != "NhwcConv" || conv.domain != "kaiwu" || conv.inputs.empty() ||
        conv.inputs[0] < 0 || conv.Has("_kaiwu_input_relu"))
      continue;
    // Only where the conv copies its input anyway: explicit nonzero pads.
    bool padded = false;
    for (int64_t p : conv.GetInts("pads")) padded = padded || p > 0;
    if (!padded || (conv.Has("auto_pad") && conv.GetString("auto_pad", "NOTSET") != "NOTSET"))
      continue;
    const int r = conv.inputs[0];
    const int p = producer[r];
    if (p < 0 || uses[r] != 1 || IsGraphOutput(*g, r)) continue;
    Node& relu = g->nodes[p];
    if (relu.op_type != "Relu" || !relu.domain.empty() || !relu.HasInput(0)) continue;
    conv.inputs[0] = relu.inputs[0];
    conv.attrs["_kaiwu_input_relu"] = IntAttr(1);
    MarkRemoved(&relu);
    ++fired;
  }
  if (fired) RemoveMarkedNodes(g);
  return fired;
}

}  // namespace kaiwu
