// Split(x) whose pieces all feed one Concat, in order:
//  - Concat on the Split's axis: the pair is an identity (Concat -> Identity,
//    which eliminate_identity then removes unless it writes a graph output);
//  - k equal pieces concatenated on the same axis in another order: exactly
//      Reshape(x, [.., k, s, ..]) -> Gather(axis a, Concat's order) -> Reshape;
//  - k equal pieces on axis a concatenated on axis b != a: exactly
//      Reshape(x, [.., k, s, ..]) -> Transpose (k moved before axis b) -> Reshape
//    because piece j's element u on a, t on b lands at j*d_b + t on b, u on a.
//    Needs x's declared shape (all dims but one) to write the Reshape shapes.
// Pieces used anywhere else, or a Concat over other values, block the rule.
#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

namespace {

using Ints = std::vector<int64_t>;

int64_t Norm(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

// Piece sizes of the Split, or false when they depend on runtime data.
bool PieceSizes(const Graph& g, const Node& split, int64_t dim, Ints* sizes) {
  const size_t k = split.outputs.size();
  if (split.HasInput(1)) {
    if (!ConstInts(g, split.inputs[1], sizes)) return false;
  } else if (split.Has("split")) {
    *sizes = split.GetInts("split");
  } else {
    if (dim <= 0 || dim % static_cast<int64_t>(k) != 0) return false;
    sizes->assign(k, dim / static_cast<int64_t>(k));
  }
  return sizes->size() == k;
}

// Reshape target keeping the `copy` leading dims of the input (0 entries), the
// rest explicit with at most one unknown (-1); false when two are unknown.
bool ShapeOperand(const Ints& dims, size_t copy, Ints* out) {
  out->clear();
  int unknown = 0;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i < copy) {
      out->push_back(0);
    } else {
      if (dims[i] < 0) ++unknown;
      out->push_back(dims[i] < 0 ? -1 : dims[i]);
    }
  }
  return unknown <= 1;
}

}  // namespace

int FoldSplitConcat(Graph* g) {
  int fired = 0;
  const std::vector<int> producer = Producers(*g);
  const std::vector<int> uses = UseCounts(*g);
  const size_t original = g->nodes.size();
  for (size_t ci = 0; ci < original; ++ci) {
    if (g->nodes[ci].op_type != "Concat" || !g->nodes[ci].domain.empty()) continue;
    const Node& concat = g->nodes[ci];
    if (concat.inputs.empty() || concat.inputs[0] < 0 || producer[concat.inputs[0]] < 0) continue;
    const int si = producer[concat.inputs[0]];
    const Node& split = g->nodes[si];
    if (split.op_type != "Split" || !split.domain.empty() || split.outputs.size() < 2) continue;
    if (concat.inputs.size() != split.outputs.size()) continue;
    // order[j]: which piece the Concat reads at position j; each piece exactly once.
    Ints order;
    std::vector<bool> seen(split.outputs.size(), false);
    for (int in : concat.inputs) {
      int j = -1;
      for (size_t q = 0; q < split.outputs.size(); ++q)
        if (split.outputs[q] == in && in >= 0) j = static_cast<int>(q);
      if (j < 0 || seen[j] || uses[in] != 1 || IsGraphOutput(*g, in)) break;
      seen[j] = true;
      order.push_back(j);
    }
    if (order.size() != split.outputs.size()) continue;
    bool in_order = true;
    for (size_t j = 0; j < order.size(); ++j) in_order = in_order && order[j] == static_cast<int64_t>(j);
    const int x = split.inputs[0];
    const int rank = KnownRank(*g, x);
    const int64_t a_raw = split.GetInt("axis", 0), b_raw = concat.GetInt("axis", 0);
    const int y = concat.outputs[0];
    const std::string base = concat.name + "_unsplit";
    bool same_axis = a_raw == b_raw || (rank > 0 && Norm(a_raw, rank) == Norm(b_raw, rank));
    if (same_axis && in_order) {  // no shapes needed
      Node& c = g->nodes[ci];
      c.op_type = "Identity";
      c.attrs.clear();
      c.inputs = {x};
      MarkRemoved(&g->nodes[si]);
      ++fired;
      continue;
    }
    if (rank <= 0) continue;
    const int64_t a = Norm(a_raw, rank), b = Norm(b_raw, rank);
    if (a < 0 || a >= rank || b < 0 || b >= rank) continue;
    Ints dims;
    for (const Dim& d : g->values[x].dims) dims.push_back(d.value);
    Ints sizes;
    if (!PieceSizes(*g, split, dims[a], &sizes)) continue;
    const int64_t k = static_cast<int64_t>(sizes.size()), s = sizes[0];
    bool equal = s > 0;
    for (int64_t v : sizes) equal = equal && v == s;
    if (!equal || (dims[a] >= 0 && dims[a] != k * s)) continue;
    if (!in_order && a != b) continue;
    // Reshape 1: axis a -> (k, s).
    Ints d1(dims.begin(), dims.begin() + a);
    d1.push_back(k);
    d1.push_back(s);
    d1.insert(d1.end(), dims.begin() + a + 1, dims.end());
    if (!in_order) {  // same axis, pieces permuted: Gather the k axis in Concat order
      Ints shape1, shape2;
      if (!ShapeOperand(d1, a, &shape1) || !ShapeOperand(dims, a, &shape2)) continue;
      int c1 = AddInts(g, shape1, base + "_shape1");
      int c2 = AddInts(g, shape2, base + "_shape2");
      int idx = AddInts(g, order, base + "_order");
      int r1 = AddOp(g, "Reshape", {x, c1}, base + "_r1");
      int gathered = AddOp(g, "Gather", {r1, idx}, base + "_gather");
      g->nodes.back().attrs["axis"] = IntAttr(a);
      Node& c = g->nodes[ci];
      c.op_type = "Reshape";
      c.attrs.clear();
      c.inputs = {gathered, c2};
      c.outputs = {y};
      MarkRemoved(&g->nodes[si]);
      ++fired;
      continue;
    }
    // Transpose: move the k axis (index a) to sit right before original axis b.
    Ints perm;
    for (int64_t i = 0; i <= rank; ++i)
      if (i != a) perm.push_back(i);
    // Axis b sits at position b of the remaining axes either way (b or b + 1 in the
    // reshaped tensor, minus the skipped a when b > a).
    perm.insert(perm.begin() + b, a);
    // Reshape 2: merge (k, d_b).
    Ints d2 = dims;
    d2[a] = s;
    d2[b] = dims[b] < 0 ? -1 : k * dims[b];
    const size_t lead = static_cast<size_t>(std::min(a, b));
    Ints shape1, shape2;
    if (!ShapeOperand(d1, lead, &shape1) || !ShapeOperand(d2, lead, &shape2)) continue;
    int c1 = AddInts(g, shape1, base + "_shape1");
    int c2 = AddInts(g, shape2, base + "_shape2");
    int r1 = AddOp(g, "Reshape", {x, c1}, base + "_r1");
    int t = AddOp(g, "Transpose", {r1}, base + "_t");
    Attribute pa;
    pa.kind = Attribute::Kind::kInts;
    pa.ints = perm;
    g->nodes.back().attrs["perm"] = pa;
    Node& c = g->nodes[ci];  // AddOp may have moved the nodes
    c.op_type = "Reshape";
    c.attrs.clear();
    c.inputs = {t, c2};
    c.outputs = {y};
    MarkRemoved(&g->nodes[si]);
    ++fired;
  }
  if (fired) RemoveMarkedNodes(g);
  return fired;
}

}  // namespace kaiwu
