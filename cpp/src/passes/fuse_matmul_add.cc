// MatMul(X, W) + B -> Gemm(X, W, B) when X is 2-D, W a static 2-D float
// matrix and B a static value that broadcasts to [M, N] (rank <= 2). For X of
// known rank > 2 the Gemm runs on X viewed as [-1, K] and its result is viewed
// back as [X.shape[:-1], N] (Reshapes are views; the shape comes from
// Shape/Slice/Concat, computed at plan time). Gemm reads W and B themselves, so
// a refit of either reaches the fused node.
#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

int FuseMatMulAdd(Graph* g) {
  int fired = 0;
  const std::vector<int> producer = Producers(*g);
  const std::vector<int> uses = UseCounts(*g);
  const std::vector<bool> is_static = StaticValues(*g);
  const size_t original = g->nodes.size();  // nodes are appended below: index, never iterate
  for (size_t ai = 0; ai < original; ++ai) {
    Node& add = g->nodes[ai];
    if (add.op_type != "Add" || !add.domain.empty() || add.num_inputs() != 2) continue;
    for (int k = 0; k < 2; ++k) {
      const int mm_out = add.inputs[k], bias = add.inputs[1 - k];
      if (mm_out < 0 || bias < 0 || !is_static[bias]) continue;
      const Node* mm = SoleProducer(*g, producer, uses, mm_out, "MatMul");
      if (!mm || mm->Has("_kaiwu_act") || mm->num_inputs() != 2) continue;
      const int x = mm->inputs[0], w = mm->inputs[1];
      const int rank = KnownRank(*g, x);
      if (rank < 2 || !is_static[w]) continue;
      std::vector<int64_t> wd, bd;
      if (!KnownDims(*g, w, &wd) || wd.size() != 2 || g->values[w].dtype != DType::kFloat32) continue;
      if (!KnownDims(*g, bias, &bd) || bd.size() > 2 || g->values[bias].dtype != DType::kFloat32)
        continue;
      // B must broadcast unidirectionally to [M, N]: its last dim 1 or N; for X of
      // rank > 2 also its row dim 1 (a per-row bias would index the flattened rows).
      if (!bd.empty() && bd.back() != 1 && bd.back() != wd[1]) continue;
      if (rank > 2 && bd.size() == 2 && bd[0] != 1) continue;
      const int y = add.outputs[0];
      MarkRemoved(&add);  // `add` and `mm` are not used past this point
      const int mm_index = producer[mm_out];
      if (rank == 2) {
        Node& m = g->nodes[mm_index];
        m.op_type = "Gemm";
        m.inputs = {x, w, bias};
        m.outputs = {y};
      } else {
        // [.., K] -> [-1, K] -> Gemm -> [.., N]; the shapes are plan-time values.
        const std::string base = g->nodes[mm_index].name + "_gemm";
        MarkRemoved(&g->nodes[mm_index]);
        int flat_shape = AddInts(g, {-1, wd[0]}, base + "_flat");
        int x2 = AddOp(g, "Reshape", {x, flat_shape}, base + "_x2");
        int gm = AddOp(g, "Gemm", {x2, w, bias}, base);
        int sx = AddOp(g, "Shape", {x}, base + "_xshape");
        int lead = AddOp(g, "Slice", {sx, AddInts(g, {0}, base + "_s0"), AddInts(g, {-1}, base + "_s1")},
                         base + "_lead");
        int out_shape = AddOp(g, "Concat", {lead, AddInts(g, {wd[1]}, base + "_n")}, base + "_oshape");
        Attribute axis;
        axis.kind = Attribute::Kind::kInt;
        g->nodes.back().attrs["axis"] = axis;
        Node back;
        back.op_type = "Reshape";
        back.name = base + "_out";
        back.opset = g->opset;
        back.inputs = {gm, out_shape};
        back.outputs = {y};
        g->AddNode(std::move(back));
      }
      ++fired;
      break;
    }
  }
  if (fired) RemoveMarkedNodes(g);
  return fired;
}

}  // namespace kaiwu
