// Transpose(p2) of Transpose(p1) of x is one Transpose with q[i] = p1[p2[i]],
// or an Identity when q is the identity. A single-input elementwise op between
// the two (Relu, Tanh, ... as left by channels-last exports: Transpose -> Relu
// -> Transpose) commutes with the transposes, so it moves past them:
//   T2(U(T1(x))) = U(T2(T1(x))).
// Both forms need explicit perms and the intermediates used only here.
#include <set>

#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

namespace {

const std::set<std::string> kUnary = {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs",
                                      "Sqrt", "Elu", "Selu", "HardSigmoid", "HardSwish", "Softplus",
                                      "Gelu", "Mish", "Identity", "Cast", "Erf", "Log"};

bool IsPerm(const std::vector<int64_t>& p) {
  std::vector<bool> seen(p.size(), false);
  for (int64_t v : p) {
    if (v < 0 || v >= static_cast<int64_t>(p.size()) || seen[v]) return false;
    seen[v] = true;
  }
  return !p.empty();
}

}  // namespace

int FoldTransposePair(Graph* g) {
  int fired = 0;
  const std::vector<int> producer = Producers(*g);
  const std::vector<int> uses = UseCounts(*g);
  std::vector<bool> touched(g->nodes.size(), false);
  for (size_t i = 0; i < g->nodes.size(); ++i) {
    Node& t2 = g->nodes[i];
    if (t2.op_type != "Transpose" || !t2.domain.empty() || !t2.HasInput(0) || touched[i]) continue;
    const std::vector<int64_t> p2 = t2.GetInts("perm");
    if (!IsPerm(p2)) continue;
    int v = t2.inputs[0];
    int unary = -1;
    if (producer[v] >= 0 && kUnary.count(g->nodes[producer[v]].op_type) &&
        g->nodes[producer[v]].domain.empty() && g->nodes[producer[v]].num_inputs() == 1 &&
        g->nodes[producer[v]].outputs.size() == 1 && uses[v] == 1 && !IsGraphOutput(*g, v)) {
      unary = producer[v];
      v = g->nodes[unary].inputs[0];
    }
    const Node* t1 = v >= 0 ? SoleProducer(*g, producer, uses, v, "Transpose") : nullptr;
    if (!t1 || touched[producer[v]] || (unary >= 0 && touched[unary])) continue;
    const std::vector<int64_t> p1 = t1->GetInts("perm");
    if (!IsPerm(p1) || p1.size() != p2.size()) continue;
    std::vector<int64_t> q(p2.size());
    bool identity = true;
    for (size_t k = 0; k < q.size(); ++k) {
      q[k] = p1[p2[k]];
      identity = identity && q[k] == static_cast<int64_t>(k);
    }
    const int x = t1->inputs[0];
    const int t1_index = producer[v];
    const int out = t2.outputs[0];
    if (unary < 0) {
      // t2 reads x directly; t1 goes away.
      t2.inputs[0] = x;
    } else {
      // x -> t2(q) -> unary -> out; t1 goes away.
      Node& u = g->nodes[unary];
      const int mid = u.outputs[0];  // reuse the unary's old value for t2's output
      t2.inputs[0] = x;
      t2.outputs[0] = mid;
      u.inputs[0] = mid;
      u.outputs[0] = out;
      touched[unary] = true;
      // mid now holds another layout (and, under a Cast, another dtype): forget its metadata.
      ForgetShape(g, mid);
      if (u.op_type == "Cast") g->values[mid].dtype = DType::kUndefined;
    }
    if (identity) {
      t2.op_type = "Identity";
      t2.attrs.clear();
    } else {
      t2.attrs["perm"].ints = q;
    }
    MarkRemoved(&g->nodes[t1_index]);
    touched[i] = touched[t1_index] = true;
    ++fired;
  }
  if (fired) RemoveMarkedNodes(g);
  return fired;
}

}  // namespace kaiwu
