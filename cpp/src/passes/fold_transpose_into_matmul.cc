// MatMul(A, Transpose(X, p)) where p sends X's innermost dim to B's second to
// last (p[r-2] == r-1: the transpose moves X's rows into B's columns, a tile
// transpose on the device) becomes MatMul(A, Transpose(X, p'), _kaiwu_trans_b)
// with p' = p with its last two entries swapped: p' keeps X's innermost dim
// innermost (a copy of whole rows, or nothing when p' is the identity) and the
// GEMM reads B transposed. E.g. attention scores q * k^T of heads split from
// [B, N, H * D]: Transpose(perm [0, 2, 3, 1]) -> MatMul becomes
// Transpose(perm [0, 2, 1, 3]) -> MatMul(trans_b).
#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

int FoldTransposeIntoMatMul(Graph* g) {
  int fired = 0;
  const std::vector<int> producer = Producers(*g);
  const std::vector<int> uses = UseCounts(*g);
  for (Node& mm : g->nodes) {
    if (mm.op_type != "MatMul" || !mm.domain.empty() || !mm.HasInput(1) ||
        mm.GetInt("_kaiwu_trans_b", 0) != 0)
      continue;
    const Node* t = SoleProducer(*g, producer, uses, mm.inputs[1], "Transpose");
    if (!t || !t->HasInput(0) || IsGraphOutput(*g, mm.inputs[1])) continue;
    std::vector<int64_t> p = t->GetInts("perm");
    const int r = static_cast<int>(p.size());
    if (r < 2 || p[r - 2] != r - 1) continue;
    std::vector<bool> seen(r, false);
    bool perm_ok = true, identity = true;
    std::swap(p[r - 2], p[r - 1]);
    for (int i = 0; i < r; ++i) {
      perm_ok = perm_ok && p[i] >= 0 && p[i] < r && !seen[p[i]];
      if (perm_ok) seen[p[i]] = true;
      identity = identity && p[i] == i;
    }
    if (!perm_ok) continue;
    Node& tn = g->nodes[producer[mm.inputs[1]]];
    if (identity) {
      mm.inputs[1] = tn.inputs[0];
      MarkRemoved(&tn);
    } else {
      tn.attrs["perm"].ints = p;
      ForgetShape(g, tn.outputs[0]);  // it holds B^T now
    }
    Attribute a;
    a.kind = Attribute::Kind::kInt;
    a.i = 1;
    mm.attrs["_kaiwu_trans_b"] = a;
    ++fired;
  }
  if (fired) RemoveMarkedNodes(g);
  return fired;
}

}  // namespace kaiwu
