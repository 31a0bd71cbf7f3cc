// MatMul(X, W) + B -> Gemm(X, W, B) when X is 2-D, W a static 2-D float
// matrix and B a static value that broadcasts to [M, N] (rank <= 2). Gemm reads
// W and B themselves, so a refit of either reaches the fused node.
#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

namespace {

// Declared or stored shape of a value, or false.
bool ShapeOf(const Graph& g, int v, std::vector<int64_t>* dims) {
  const Value& val = g.values[v];
  dims->clear();
  if (val.data) {
    *dims = val.data->shape();
    return true;
  }
  if (!val.has_shape) return false;
  for (const Dim& d : val.dims) dims->push_back(d.value);
  return true;
}

}  // namespace

int FuseMatMulAdd(Graph* g) {
  int fired = 0;
  const std::vector<int> producer = Producers(*g);
  const std::vector<int> uses = UseCounts(*g);
  const std::vector<bool> is_static = StaticValues(*g);
  for (Node& add : g->nodes) {
    if (add.op_type != "Add" || !add.domain.empty() || add.num_inputs() != 2) continue;
    for (int k = 0; k < 2; ++k) {
      const int mm_out = add.inputs[k], bias = add.inputs[1 - k];
      if (mm_out < 0 || bias < 0 || !is_static[bias]) continue;
      const Node* mm = SoleProducer(*g, producer, uses, mm_out, "MatMul");
      if (!mm || mm->Has("_kaiwu_act") || mm->num_inputs() != 2) continue;
      const int x = mm->inputs[0], w = mm->inputs[1];
      if (KnownRank(*g, x) != 2 || !is_static[w]) continue;
      std::vector<int64_t> wd, bd;
      if (!ShapeOf(*g, w, &wd) || wd.size() != 2 || g->values[w].dtype != DType::kFloat32) continue;
      if (!ShapeOf(*g, bias, &bd) || bd.size() > 2 || g->values[bias].dtype != DType::kFloat32)
        continue;
      // B must broadcast unidirectionally to [M, N]: its last dim 1 or N.
      if (!bd.empty() && bd.back() != 1 && bd.back() != wd[1]) continue;
      Node& m = g->nodes[producer[mm_out]];
      m.op_type = "Gemm";
      m.inputs = {x, w, bias};
      m.outputs = {add.outputs[0]};
      MarkRemoved(&add);
      ++fired;
      break;
    }
  }
  if (fired) RemoveMarkedNodes(g);
  return fired;
}

}  // namespace kaiwu
