// Gemm(Transpose(A), ...) or Gemm(.., Transpose(B), ..) with a 2-D transpose
// reads the untransposed matrix with transA/transB flipped. The Gemm then reads
// the original weight itself, so a refit reaches it; the static transposed copy
// (and its memory) disappears.
#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

int FoldTransposeIntoGemm(Graph* g) {
  int fired = 0;
  const std::vector<int> producer = Producers(*g);
  const std::vector<int> uses = UseCounts(*g);
  const std::vector<bool> is_static = StaticValues(*g);
  for (Node& gemm : g->nodes) {
    if (gemm.op_type != "Gemm" || !gemm.domain.empty()) continue;
    for (int k = 0; k < 2; ++k) {
      if (!gemm.HasInput(k)) continue;
      const Node* t = SoleProducer(*g, producer, uses, gemm.inputs[k], "Transpose");
      if (!t || !t->HasInput(0) || !is_static[t->inputs[0]]) continue;
      std::vector<int64_t> perm = t->GetInts("perm");
      bool swap2d = perm == std::vector<int64_t>{1, 0} ||
                    (perm.empty() && KnownRank(*g, t->inputs[0]) == 2);
      if (!swap2d) continue;
      const char* attr = k == 0 ? "transA" : "transB";
      Attribute a;
      a.kind = Attribute::Kind::kInt;
      a.i = gemm.GetInt(attr, 0) ? 0 : 1;
      gemm.attrs[attr] = a;
      const int src = t->inputs[0];
      MarkRemoved(&g->nodes[producer[gemm.inputs[k]]]);
      gemm.inputs[k] = src;
      ++fired;
    }
  }
  if (fired) RemoveMarkedNodes(g);
  return fired;
}

}  // namespace kaiwu
