// A batch-first recurrent layer as exporters write it (PyTorch's
// batch_first=True):
//   Transpose(x, [1, 0, 2]) -> LSTM/GRU (layout 0, one direction) -> Y
//   -> Squeeze(axes [1]) -> Transpose([1, 0, 2])
// becomes the op in layout 1, reading x and writing Y as [batch, seq, 1, hidden],
// squeezed at axis 2. With one direction the states' layouts [1, batch, hidden]
// and [batch, 1, hidden] hold the same bytes, so initial_h / initial_c and
// Y_h / Y_c pass through Reshapes (views). Two transposes of the sequence,
// each a kernel and a pass over memory, go away.
#include <string>

#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

namespace {

bool IsSwap01(const Node& n) {
  return n.op_type == "Transpose" && n.domain.empty() && n.GetInts("perm") == std::vector<int64_t>{1, 0, 2};
}

// Squeeze of axis 1 only (axes as the input of opset 13 or the older attribute).
bool SqueezesAxis1(const Graph& g, const Node& n) {
  if (n.op_type != "Squeeze" || !n.domain.empty()) return false;
  std::vector<int64_t> axes;
  if (n.HasInput(1)) {
    if (!ConstInts(g, n.inputs[1], &axes)) return false;
  } else {
    axes = n.GetInts("axes");
  }
  return axes.size() == 1 && (axes[0] == 1 || axes[0] == -3);
}

// A Reshape of `from` to [d0, d1, hidden] (-1 for the batch) written to `to`.
void AddReshape(Graph* g, int from, int to, std::vector<int64_t> shape, const std::string& hint) {
  Node r;
  r.op_type = "Reshape";
  r.name = g->values[to].name + "/" + hint;
  r.opset = g->opset;
  r.inputs = {from, AddInts(g, std::move(shape), r.name + "/shape")};
  r.outputs = {to};
  g->AddNode(std::move(r));
}

}  // namespace

int FoldRnnBatchFirst(Graph* g) {
  int fired = 0;
  const std::vector<int> producer = Producers(*g);
  const std::vector<int> uses = UseCounts(*g);
  const std::vector<std::vector<int>> consumers = g->Consumers();
  const size_t count = g->nodes.size();  // Reshapes are appended past it
  for (size_t i = 0; i < count; ++i) {
    Node& rnn = g->nodes[i];
    if ((rnn.op_type != "LSTM" && rnn.op_type != "GRU") || !rnn.domain.empty()) continue;
    if (rnn.GetInt("layout", 0) != 0 || rnn.GetString("direction", "forward") == "bidirectional") continue;
    const int64_t hidden = rnn.GetInt("hidden_size", 0);
    if (hidden <= 0 || !rnn.HasInput(0) || rnn.outputs.empty() || rnn.outputs[0] < 0) continue;
    const int x_t = rnn.inputs[0];
    if (producer[x_t] < 0 || !IsSwap01(g->nodes[producer[x_t]])) continue;
    const int y = rnn.outputs[0];
    if (uses[y] != 1 || IsGraphOutput(*g, y) || consumers[y].size() != 1) continue;
    Node& sq = g->nodes[consumers[y][0]];
    if (!SqueezesAxis1(*g, sq) || sq.inputs[0] != y) continue;
    const int y3 = sq.outputs[0];
    if (uses[y3] != 1 || IsGraphOutput(*g, y3) || consumers[y3].size() != 1) continue;
    const int back = consumers[y3][0];
    if (!IsSwap01(g->nodes[back])) continue;

    const std::string name = rnn.name.empty() ? rnn.op_type : rnn.name;
    const bool lstm = rnn.op_type == "LSTM";
    rnn.inputs[0] = g->nodes[producer[x_t]].inputs[0];  // the Transpose dies if nothing else reads it
    rnn.attrs["layout"] = IntAttr(1);
    // (AddReshape appends nodes: the references above are not used past here.)
    // initial_h (5) and, for the LSTM, initial_c (6): [1, batch, H] -> [batch, 1, H].
    for (int k : {5, 6}) {
      if (!g->nodes[i].HasInput(k) || (k == 6 && !lstm)) continue;
      const int state = g->nodes[i].inputs[k];
      const int batch_first = AddIntermediate(g, g->values[state].name + "/batch_first");
      AddReshape(g, state, batch_first, {-1, 1, hidden}, "batch_first");
      g->nodes[i].inputs[k] = batch_first;
    }
    // Y_h (1) and Y_c (2): [batch, 1, H] written, read as [1, batch, H].
    for (size_t k = 1; k < g->nodes[i].outputs.size(); ++k) {
      const int old = g->nodes[i].outputs[k];
      if (old < 0) continue;
      const int batch_first = AddIntermediate(g, g->values[old].name + "/batch_first");
      g->nodes[i].outputs[k] = batch_first;
      AddReshape(g, batch_first, old, {1, -1, hidden}, "seq_first");
    }
    // Y is now [batch, seq, 1, H]: the Squeeze drops axis 2 and writes what the
    // second Transpose wrote.
    ForgetShape(g, y);
    Node& squeeze = g->nodes[consumers[y][0]];
    if (squeeze.HasInput(1)) squeeze.inputs[1] = AddInts(g, {2}, name + "/squeeze_axes");
    else squeeze.attrs["axes"] = IntsAttr({2});
    Node& transpose = g->nodes[back];
    squeeze.outputs[0] = transpose.outputs[0];
    MarkRemoved(&transpose);
    ++fired;
  }
  if (fired) {
    RemoveMarkedNodes(g);
    g->RemoveDeadNodes();
  }
  return fired;
}

}  // namespace kaiwu
