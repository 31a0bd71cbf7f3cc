// torch's exact GELU as exported (0.5 * x * (1 + erf(x / sqrt(2)))): Div (or Mul
// by 1 / sqrt(2)) -> Erf -> Add 1 -> Mul by x -> Mul by 0.5 (or x * 0.5 first,
// then times the sum; operands in either order) becomes one Gelu node, one pass
// over memory instead of five (a transformer policy's feed-forward layers).
// The numbers must be structural constants within 1e-6 of 1 / sqrt(2) (sqrt(2)
// for the Div), 1 and 0.5, each of one element, and either of rank 0 or of a
// rank no larger than x's known rank (so the broadcast keeps x's shape); every
// intermediate has one reader and is no graph output.
#include <cmath>

#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

namespace {

class GeluFuser {
 public:
  explicit GeluFuser(Graph* g) : g_(*g), producer_(Producers(*g)), uses_(UseCounts(*g)) {}

  int Run() {
    int made = 0;
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      if (IsOp(g_.nodes[i], "Erf") && TryFuse(static_cast<int>(i))) ++made;
    if (made) RemoveMarkedNodes(&g_);
    return made;
  }

 private:
  static bool IsOp(const Node& n, const char* op) {
    return n.op_type == op && n.domain.empty() && n.outputs.size() == 1 && n.outputs[0] >= 0;
  }

  // The one node reading v (v no graph output), or -1.
  int SoleReader(int v) const { return kaiwu::SoleReader(g_, uses_, v); }

  // A structural one-element float constant within 1e-6 of `want` whose
  // broadcast keeps a rank-`rank` operand's shape (rank -1: unknown).
  bool Near(int v, double want, int rank) const {
    if (v < 0) return false;
    const Value& val = g_.values[v];
    if (val.kind != ValueKind::kConstant || !val.data || val.data->size() != 1) return false;
    std::vector<float> f;
    if (!ConstFloats(g_, v, &f) || f.size() != 1 || std::fabs(f[0] - want) > 1e-6 * std::fabs(want))
      return false;
    const int r = static_cast<int>(val.data->shape().size());
    return r == 0 || (rank >= 0 && r <= rank);
  }

  // Binary `op` node `i` with `x` as one operand: the other, else -1.
  int Other(int i, const char* op, int x) const {
    if (i < 0 || !IsOp(g_.nodes[i], op) || g_.nodes[i].num_inputs() != 2) return -1;
    const Node& n = g_.nodes[i];
    if (n.inputs[0] == x) return n.inputs[1];
    if (n.inputs[1] == x && std::string(op) != "Div") return n.inputs[0];
    return -1;
  }

  bool TryFuse(int erf) {
    const Node& e = g_.nodes[erf];
    if (e.num_inputs() != 1) return false;
    // x / sqrt(2) or x * (1 / sqrt(2)), read only by the Erf.
    const int scaled = e.inputs[0];
    const int sn = scaled >= 0 ? producer_[scaled] : -1;
    if (sn < 0 || SoleReader(scaled) != erf || g_.nodes[sn].num_inputs() != 2) return false;
    const Node& s = g_.nodes[sn];
    int x = -1;
    for (int side = 0; side < 2 && x < 0; ++side) {
      const int cand = s.inputs[side], c = s.inputs[1 - side];
      const int rank = cand >= 0 ? KnownRank(g_, cand) : -1;
      if (IsOp(s, "Div") && side == 0 && Near(c, std::sqrt(2.0), rank)) x = cand;
      if (IsOp(s, "Mul") && Near(c, std::sqrt(0.5), rank)) x = cand;
    }
    if (x < 0) return false;
    const int rank = KnownRank(g_, x);
    // erf + 1
    const int add = SoleReader(e.outputs[0]);
    if (!Near(Other(add, "Add", e.outputs[0]), 1.0, rank)) return false;
    const int sum = g_.nodes[add].outputs[0];
    // (x * sum) * 0.5, or (x * 0.5) * sum
    const int m1 = SoleReader(sum);
    if (m1 < 0 || !IsOp(g_.nodes[m1], "Mul") || g_.nodes[m1].num_inputs() != 2) return false;
    const int m1_other = Other(m1, "Mul", sum);
    int last = -1;
    std::vector<int> gone = {sn, erf, add, m1};
    if (m1_other == x) {  // x * sum, then * 0.5
      const int m2 = SoleReader(g_.nodes[m1].outputs[0]);
      if (!Near(Other(m2, "Mul", g_.nodes[m1].outputs[0]), 0.5, rank)) return false;
      last = m2;
      gone.push_back(m2);
    } else {  // half = x * 0.5 (read only here), then half * sum
      const int half = m1_other;
      const int hn = half >= 0 ? producer_[half] : -1;
      if (hn < 0 || SoleReader(half) != m1 || !Near(Other(hn, "Mul", x), 0.5, rank)) return false;
      last = m1;
      gone.push_back(hn);
    }
    Node gelu;
    gelu.op_type = "Gelu";
    gelu.name = g_.nodes[last].name + "_gelu";
    gelu.opset = 20;
    gelu.inputs = {x};
    gelu.outputs = {g_.nodes[last].outputs[0]};
    for (int n : gone)
      if (n != last) MarkRemoved(&g_.nodes[n]);
    g_.nodes[last] = std::move(gelu);  // every input is made before the last Mul
    return true;
  }

  Graph& g_;
  std::vector<int> producer_, uses_;
};

}  // namespace

int FuseGelu(Graph* g) {
  const int made = GeluFuser(g).Run();
  if (made) g->Verify();
  return made;
}

}  // namespace kaiwu
