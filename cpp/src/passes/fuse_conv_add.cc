// CPU sessions, after the layout pass (OptimizeForCpu): Add(r, NhwcConv(...))
// becomes NhwcConv(..., sum = r) when r provably has the conv output's shape,
// so a residual block's Add costs no pass over memory of its own: the conv's
// register tile adds r's rows before its store. The conv must have no fused
// activation (act(conv) + r is not act(conv + r)) and be the Add's only
// reason to exist: its output read by nothing else.
//
// Shapes are not known before planning, so the proof is structural: walking
// back from the conv's input through unary elementwise ops and NhwcConvs that
// keep the shape (stride 1, no dilation, pads (k - 1) / 2 on both sides,
// weight [C, KH, KW, C]) reaches r. That is the ResNet / IMPALA block.
#include <string>
#include <vector>

#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

namespace {

const char* const kUnary[] = {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Elu", "Selu",
                              "HardSigmoid", "HardSwish", "Softplus", "Gelu", "Clip", "Neg"};

// An NhwcConv whose output has its input's shape: stride 1, no dilation,
// "same" explicit pads and a [C, KH, KW, C] weight.
bool KeepsShape(const Graph& g, const std::vector<int>& producer, const Node& n) {
  if (n.op_type != "NhwcConv" || n.domain != "kaiwu" || n.GetInt("group", 1) != 1) return false;
  if (n.Has("auto_pad") && n.GetString("auto_pad", "NOTSET") != "NOTSET") return false;
  for (int64_t s : n.GetInts("strides"))
    if (s != 1) return false;
  for (int64_t d : n.GetInts("dilations"))
    if (d != 1) return false;
  const std::vector<int64_t> k = n.GetInts("kernel_shape");
  std::vector<int64_t> pads = n.GetInts("pads");
  if (pads.empty()) pads.assign(4, 0);
  if (k.size() != 2 || pads.size() != 4) return false;
  for (int d = 0; d < 2; ++d)
    if (k[d] % 2 != 1 || pads[d] != (k[d] - 1) / 2 || pads[d + 2] != pads[d]) return false;
  // M == C, from the static weight [M, KH, KW, C].
  std::vector<int64_t> wd;
  return n.num_inputs() > 1 && n.inputs[1] >= 0 && StaticDims(g, producer, n.inputs[1], &wd) &&
         wd.size() == 4 && wd[0] == wd[3];
}

// Whether `from` reaches `target` going back through shape-keeping nodes.
bool SameShapeChain(const Graph& g, const std::vector<int>& producer, int from, int target) {
  for (int hops = 0; hops < 16 && from >= 0; ++hops) {
    if (from == target) return true;
    const int p = producer[from];
    if (p < 0 || g.nodes[p].inputs.empty()) return false;
    const Node& n = g.nodes[p];
    bool unary = false;
    for (const char* op : kUnary) unary = unary || (n.domain.empty() && n.op_type == op);
    if (!unary && !KeepsShape(g, producer, n)) return false;
    from = n.inputs[0];
  }
  return false;
}

}  // namespace

int FuseNhwcConvAdd(Graph* g) {
  const std::vector<int> producer = Producers(*g);
  const std::vector<int> uses = UseCounts(*g);
  int fired = 0;
  for (Node& add : g->nodes) {
    if (add.op_type != "Add" || !add.domain.empty() || add.num_inputs() != 2 ||
        add.outputs.size() != 1 || add.inputs[0] < 0 || add.inputs[1] < 0)
      continue;
    for (int side = 0; side < 2; ++side) {
      const int c = add.inputs[side], r = add.inputs[1 - side];
      const int p = producer[c];
      if (p < 0 || uses[c] != 1 || IsGraphOutput(*g, c) || c == r) continue;
      Node& conv = g->nodes[p];
      if (conv.op_type != "NhwcConv" || conv.domain != "kaiwu" || conv.Has("_kaiwu_act") ||
          conv.HasInput(4) || conv.inputs.empty())
        continue;
      if (!KeepsShape(*g, producer, conv) || !SameShapeChain(*g, producer, conv.inputs[0], r))
        continue;
      conv.inputs.resize(4, -1);
      conv.inputs.push_back(r);
      conv.outputs[0] = add.outputs[0];
      MarkRemoved(&add);
      ++fired;
      break;
    }
  }
  if (fired) RemoveMarkedNodes(g);
  return fired;
}

}  // namespace kaiwu
