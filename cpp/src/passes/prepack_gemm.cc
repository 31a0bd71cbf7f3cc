// CPU sessions only (run by the session after Optimize, not in kRules): Gemm
// and MatMul against a static float32 matrix become kaiwu PackedGemm (and an
// LSTM or GRU with static W and R gets their packed forms as extra inputs,
// "_kaiwu_packed"), whose B
// is the matrix in column panels of 16 ([ceil(N / 16), K, 16], zero-padded
// columns: backends/cpu/sgemm_packed.h). The packing is ordinary nodes over
// the original weight (Pad, Reshape, Transpose), so the static program
// computes it at load and again after each refit; the kernel never repacks.
#include <map>
#include <utility>

#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

namespace {

constexpr int64_t kPanel = 16;  // cpu::kPackedPanel

// Nodes packing static W ([K, N], or [N, K] with trans_b) into panels.
int PackNodes(Graph* g, int w, bool trans_b, int64_t k, int64_t n, const std::string& base) {
  const int64_t panels = (n + kPanel - 1) / kPanel, np = panels * kPanel;
  int x = w;
  if (np != n) {
    // Zero columns up to a whole panel: pads are [begin..., end...].
    std::vector<int64_t> pads = trans_b ? std::vector<int64_t>{0, 0, np - n, 0}
                                        : std::vector<int64_t>{0, 0, 0, np - n};
    x = AddOp(g, "Pad", {x, AddInts(g, pads, base + "_pads")}, base + "_padded");
  }
  const std::vector<int64_t> split =
      trans_b ? std::vector<int64_t>{panels, kPanel, k} : std::vector<int64_t>{k, panels, kPanel};
  x = AddOp(g, "Reshape", {x, AddInts(g, split, base + "_split")}, base + "_split");
  x = AddOp(g, "Transpose", {x}, base + "_packed");
  Attribute perm;
  perm.kind = Attribute::Kind::kInts;
  perm.ints = trans_b ? std::vector<int64_t>{0, 2, 1} : std::vector<int64_t>{1, 0, 2};
  g->nodes.back().attrs["perm"] = perm;
  return x;
}

// Nodes packing static W [dirs, G, K] (an LSTM's or GRU's W or R) into per-direction
// panels of W^T: [dirs, ceil(G / 16), K, 16].
int PackRnnNodes(Graph* g, int w, int64_t dirs, int64_t gates, int64_t k, const std::string& base) {
  const int64_t panels = (gates + kPanel - 1) / kPanel, gp = panels * kPanel;
  int x = w;
  if (gp != gates)
    x = AddOp(g, "Pad", {x, AddInts(g, {0, 0, 0, 0, gp - gates, 0}, base + "_pads")},
              base + "_padded");
  x = AddOp(g, "Reshape", {x, AddInts(g, {dirs, panels, kPanel, k}, base + "_split")},
            base + "_split");
  x = AddOp(g, "Transpose", {x}, base + "_packed");
  Attribute perm;
  perm.kind = Attribute::Kind::kInts;
  perm.ints = {0, 1, 3, 2};
  g->nodes.back().attrs["perm"] = perm;
  return x;
}

// LSTM (4 gates, packed inputs 8 and 9) or GRU (3 gates, inputs 6 and 7) with
// static W and R: their packed forms as those inputs.
bool PrepackRnn(Graph* g, size_t i, const std::vector<bool>& is_static, int64_t gates_per_unit,
                size_t first) {
  const Node& node = g->nodes[i];
  if (node.num_inputs() < 3 || node.Has("_kaiwu_packed")) return false;
  const int w = node.inputs[1], r = node.inputs[2];
  if (w < 0 || r < 0 || !is_static[w] || !is_static[r]) return false;
  if (g->values[w].dtype != DType::kFloat32 || g->values[r].dtype != DType::kFloat32) return false;
  std::vector<int64_t> wd, rd;
  if (!KnownDims(*g, w, &wd) || !KnownDims(*g, r, &rd) || wd.size() != 3 || rd.size() != 3) return false;
  const int64_t dirs = wd[0], gates = wd[1], h = rd[2];
  if (gates == 0 || gates != gates_per_unit * h || rd[0] != dirs || rd[1] != gates || wd[2] == 0 ||
      h == 0)
    return false;
  const std::string base = node.name + "_prepack";
  const int pw = PackRnnNodes(g, w, dirs, gates, wd[2], base + "_w");
  const int pr = PackRnnNodes(g, r, dirs, gates, h, base + "_r");
  Node& nd = g->nodes[i];  // AddOp may have moved the node vector
  nd.inputs.resize(first, -1);
  nd.inputs.push_back(pw);
  nd.inputs.push_back(pr);
  nd.attrs["_kaiwu_packed"] = IntAttr(1);
  return true;
}

// PackedGemm (no bias, no activation) whose only reader is Add(y, B) with B a
// static float32 [N] or [1, N]: B becomes its bias and it writes the Add's
// result (a MatMul + Add of a rank fuse_matmul_add could not see).
int FoldBiasAdds(Graph* g) {
  int fired = 0;
  const std::vector<int> producer = Producers(*g);
  const std::vector<int> uses = UseCounts(*g);
  const std::vector<bool> is_static = StaticValues(*g);
  for (Node& add : g->nodes) {
    if (add.op_type != "Add" || !add.domain.empty() || add.num_inputs() != 2 || add.outputs.empty())
      continue;
    for (int k = 0; k < 2; ++k) {
      const int y = add.inputs[k], bias = add.inputs[1 - k];
      if (y < 0 || bias < 0 || y == bias || !is_static[bias] || producer[y] < 0) continue;
      if (uses[y] != 1 || IsGraphOutput(*g, y)) continue;
      Node& pg = g->nodes[producer[y]];
      if (pg.op_type != "PackedGemm" || pg.domain != "kaiwu" || pg.num_inputs() != 2 ||
          pg.Has("_kaiwu_act"))
        continue;
      std::vector<int64_t> bd;
      const int64_t n = pg.GetInt("n", -1);
      if (g->values[bias].dtype != DType::kFloat32 || !KnownDims(*g, bias, &bd) || bd.empty() ||
          bd.size() > 2 || bd.back() != n || (bd.size() == 2 && bd[0] != 1))
        continue;
      pg.inputs.push_back(bias);
      pg.outputs = {add.outputs[0]};
      MarkRemoved(&add);
      ++fired;
      break;
    }
  }
  if (fired) RemoveMarkedNodes(g);
  return fired;
}

}  // namespace

int PrepackNhwcConvWeights(Graph* g) {
  int fired = 0;
  const std::vector<bool> is_static = StaticValues(*g);
  const std::vector<int> producer = Producers(*g);
  const size_t original = g->nodes.size();
  for (size_t i = 0; i < original; ++i) {
    const Node& node = g->nodes[i];
    if (node.domain != "kaiwu" || node.op_type != "NhwcConv" || node.HasInput(3)) continue;
    if (node.num_inputs() < 2 || node.inputs[1] < 0 || !is_static[node.inputs[1]]) continue;
    const int w = node.inputs[1];
    std::vector<int64_t> wd;  // [M, KH, KW, C]
    if (!StaticDims(*g, producer, w, &wd) || wd.size() != 4) continue;
    const int64_t m = wd[0], k = wd[1] * wd[2] * wd[3];
    if (m == 0 || k == 0) continue;
    const std::string base = node.name + "_prepack";
    const int rows = AddOp(g, "Reshape", {w, AddInts(g, {m, k}, base + "_rows")}, base + "_rows");
    const int packed = PackNodes(g, rows, /*trans_b=*/true, k, m, base);
    Node& nd = g->nodes[i];  // AddOp may have moved the node vector
    nd.inputs.resize(3, -1);
    nd.inputs.push_back(packed);
    ++fired;
  }
  if (fired) g->Verify();
  return fired;
}

int PrepackGemmWeights(Graph* g) {
  int fired = 0;
  const std::vector<bool> is_static = StaticValues(*g);
  const size_t original = g->nodes.size();  // nodes are appended below: index, never iterate
  // A weight read by several Gemm/MatMul nodes the same way is packed once.
  std::map<std::pair<int, bool>, int> packed_of;
  for (size_t i = 0; i < original; ++i) {
    const Node& node = g->nodes[i];
    if (!node.domain.empty()) continue;
    if (node.op_type == "LSTM" || node.op_type == "GRU") {
      const bool lstm = node.op_type == "LSTM";
      fired += PrepackRnn(g, i, is_static, lstm ? 4 : 3, lstm ? 8 : 6) ? 1 : 0;
      continue;
    }
    const bool gemm = node.op_type == "Gemm", matmul = node.op_type == "MatMul";
    if (!(gemm || matmul) || node.num_inputs() < 2) continue;
    const int a = node.inputs[0], w = node.inputs[1];
    if (a < 0 || w < 0 || !is_static[w] || is_static[a]) continue;
    // A's dtype may not be known before inference; ONNX makes it W's.
    if (g->values[w].dtype != DType::kFloat32) continue;
    std::vector<int64_t> wd;
    if (!KnownDims(*g, w, &wd) || wd.size() != 2) continue;
    bool trans_b = false;
    int bias = -1;
    if (gemm) {
      if (node.GetInt("transA", 0) != 0 || node.GetFloat("alpha", 1.f) != 1.f) continue;
      trans_b = node.GetInt("transB", 0) != 0;
      if (node.HasInput(2)) {
        // Only a bias per column (C of shape [N] or [1, N], beta 1) fuses.
        std::vector<int64_t> cd;
        const int64_t n = trans_b ? wd[0] : wd[1];
        bias = node.inputs[2];
        if (node.GetFloat("beta", 1.f) != 1.f || g->values[bias].dtype != DType::kFloat32 ||
            !KnownDims(*g, bias, &cd) || cd.empty() || cd.back() != n ||
            (cd.size() == 2 && cd[0] != 1) || cd.size() > 2)
          continue;
      }
    }
    // MatMul(A [.., K], W [K, N]) of any rank of A: PackedGemm's result is
    // A.shape[:-1] + [N], which is also MatMul's for a 1-D A.
    const int64_t k = trans_b ? wd[1] : wd[0], n = trans_b ? wd[0] : wd[1];
    if (k == 0 || n == 0) continue;
    auto known = packed_of.find({w, trans_b});
    const int packed = known != packed_of.end()
                           ? known->second
                           : PackNodes(g, w, trans_b, k, n, g->nodes[i].name + "_prepack");
    packed_of[{w, trans_b}] = packed;
    Node& nd = g->nodes[i];  // AddOp may have moved the node vector
    nd.op_type = "PackedGemm";
    nd.domain = "kaiwu";
    nd.opset = 1;
    nd.inputs = bias >= 0 ? std::vector<int>{a, packed, bias} : std::vector<int>{a, packed};
    std::map<std::string, Attribute> attrs;
    for (const char* keep : {"_kaiwu_act", "_kaiwu_act_params"})
      if (nd.Has(keep)) attrs[keep] = nd.attrs[keep];
    attrs["n"] = IntAttr(n);
    nd.attrs = std::move(attrs);
    ++fired;
  }
  fired += FoldBiasAdds(g);
  if (fired) g->Verify();  // sorts the appended packing nodes before their readers
  return fired;
}

}  // namespace kaiwu
