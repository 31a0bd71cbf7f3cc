// Transpose(X, p) -> MatMul(., W) [-> Add(., b)] where p keeps X's innermost
// dim innermost (p[r-1] == r-1), W is a static 2-D matrix and b a static value
// of rank <= 1, each intermediate read by the next node only, becomes
// MatMul(X, W) [-> Add(., b)] -> Transpose(., p): the product and the bias act
// on the innermost dim alone, so they commute with a permutation of the outer
// dims. The transpose then follows the layer and can fold into what reads it
// (the attention's Q/K/V views, another Transpose), and the MatMul reads X as
// it is. torch's nn.MultiheadAttention (batch_first) export transposes each
// layer's input [B, L, E] -> [L, B, E] right before its input projection.
#include <string>
#include <utility>

#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

namespace {

// One rewrite, or false when none is left.
bool SinkOne(Graph* g) {
  const std::vector<int> uses = UseCounts(*g);
  const std::vector<bool> is_static = StaticValues(*g);
  for (size_t ti = 0; ti < g->nodes.size(); ++ti) {
    const Node& t = g->nodes[ti];
    if (t.op_type != "Transpose" || !t.domain.empty() || !t.HasInput(0) || t.outputs.size() != 1) continue;
    const std::vector<int64_t> p = t.GetInts("perm");
    const int r = static_cast<int>(p.size());
    if (r < 3 || p[r - 1] != r - 1) continue;  // rank 2 keeping its last dim is the identity
    const int tv = t.outputs[0];
    if (IsGraphOutput(*g, tv)) continue;
    // Its readers: one MatMul reading it as A, and Shape nodes (torch's export
    // reads the sizes from the transposed tensor), nothing else.
    int mi = -1, others = 0;
    std::vector<int> shapes;
    for (size_t j = 0; j < g->nodes.size(); ++j) {
      const Node& n = g->nodes[j];
      bool reads = false;
      for (int in : n.inputs) reads = reads || in == tv;
      if (!reads) continue;
      if (n.op_type == "MatMul" && n.domain.empty() && n.num_inputs() == 2 && n.inputs[0] == tv &&
          n.inputs[1] != tv && n.outputs.size() == 1 && !n.Has("_kaiwu_trans_b") && mi < 0)
        mi = static_cast<int>(j);
      else if (n.op_type == "Shape" && n.domain.empty() && !n.Has("start") && !n.Has("end"))
        shapes.push_back(static_cast<int>(j));
      else
        ++others;
    }
    if (mi < 0 || others > 0) continue;
    const Node& mm = g->nodes[mi];
    std::vector<int64_t> wd;
    if (mm.inputs[1] < 0 || !is_static[mm.inputs[1]] || !KnownDims(*g, mm.inputs[1], &wd) || wd.size() != 2)
      continue;
    // The bias Add reading the product alone, if any.
    int last = mi;
    const int mv = mm.outputs[0];
    if (uses[mv] == 1 && !IsGraphOutput(*g, mv)) {
      for (size_t j = 0; j < g->nodes.size(); ++j) {
        const Node& n = g->nodes[j];
        if (n.op_type != "Add" || !n.domain.empty() || n.num_inputs() != 2 || n.outputs.size() != 1) continue;
        const int k = n.inputs[0] == mv ? 1 : n.inputs[1] == mv ? 0 : -1;
        if (k < 0) continue;
        std::vector<int64_t> bd;
        const int b = n.inputs[k];
        if (b >= 0 && is_static[b] && KnownDims(*g, b, &bd) && bd.size() <= 1) last = static_cast<int>(j);
        break;
      }
    }
    const int x = t.inputs[0];
    const std::string base = t.name.empty() ? g->values[tv].name : t.name;
    // Shape(Transpose(X, p)) = Gather(Shape(X), p): computed when the plan is made, as before.
    for (int si : shapes) {
      const int old_out = g->nodes[si].outputs[0];
      const int xs = AddIntermediate(g, g->values[old_out].name + "_of_input");
      g->values[xs].dtype = DType::kInt64;
      g->nodes[si].inputs[0] = x;
      g->nodes[si].outputs[0] = xs;
      Node gather;
      gather.op_type = "Gather";
      gather.name = g->nodes[si].name + "_permuted";
      gather.opset = g->opset;
      gather.inputs = {xs, AddInts(g, p, base + "_perm")};
      gather.outputs = {old_out};
      gather.attrs["axis"] = IntAttr(0);
      g->AddNode(std::move(gather));
    }
    // X -> MatMul -> [Add ->] (the transpose's old value) -> Transpose -> the old
    // output of the last node.
    const int y = g->nodes[last].outputs[0];
    g->values[tv].dtype = g->values[y].dtype;
    g->nodes[mi].inputs[0] = x;
    ForgetShape(g, mv);
    ForgetShape(g, tv);
    g->nodes[last].outputs[0] = tv;
    g->nodes[ti].inputs[0] = tv;
    g->nodes[ti].outputs[0] = y;
    g->Verify();  // re-sorts: the transpose now follows the layer
    return true;
  }
  return false;
}

}  // namespace

int SinkTransposeBelowMatMul(Graph* g) {
  int fired = 0;
  while (SinkOne(g)) ++fired;
  return fired;
}

}  // namespace kaiwu
