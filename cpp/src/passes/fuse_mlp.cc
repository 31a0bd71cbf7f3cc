#include "passes/fuse_mlp.h"

#include <map>
#include <string>
#include <vector>

#include "passes/match_util.h"
#include "passes/rewrite_util.h"

namespace kaiwu {
namespace {

int64_t Round16(int64_t v) { return (v + 15) / 16 * 16; }
bool IsHalf(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16; }
int64_t HalfCode(DType t) { return t == DType::kFloat16 ? 10 : 16; }

// Known 2-D dims of a value, or false.
bool Dims2(const Value& v, int64_t* rows, int64_t* cols) {
  if (!v.has_shape || v.dims.size() != 2 || v.dims[1].value < 1) return false;
  *rows = v.dims[0].value;
  *cols = v.dims[1].value;
  return true;
}

struct Layer {
  int node = -1;
  int input = -1;  // -1: the group's X, else a layer index
  int64_t k = 0, n = 0;
};

struct Group {
  int x = -1;  // the value every first layer reads
  DType dtype = DType::kUndefined;
  std::vector<Layer> layers;
  int64_t weights = 0;
};

class Fuser {
 public:
  Fuser(Graph* g, const std::function<bool(OpId, DType)>& has_kernel)
      : g_(*g),
        has_kernel_(has_kernel),
        static_(StaticValues(*g)),
        consumers_(g->Consumers()),
        producer_(Producers(*g)) {}

  int Run() {
    std::map<int, int> group_of_x, group_of_output, layer_of_output;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      int64_t k = 0, n = 0;
      if (!Candidate(g_.nodes[i], &k, &n)) continue;
      const Node& node = g_.nodes[i];
      const int a = node.inputs[0];
      const DType t = g_.values[a].dtype;
      int gi = -1, input = -1;
      if (auto it = group_of_output.find(a); it != group_of_output.end()) {
        gi = it->second;
        input = layer_of_output.at(a);
      } else if (auto jt = group_of_x.find(a); jt != group_of_x.end()) {
        gi = jt->second;
      } else {
        gi = static_cast<int>(groups_.size());
        groups_.push_back(Group{a, t, {}, 0});
        group_of_x[a] = gi;
      }
      Group& grp = groups_[gi];
      if (grp.dtype != t) continue;
      grp.layers.push_back(Layer{static_cast<int>(i), input, k, n});
      grp.weights += k * n;
      group_of_output[node.outputs[0]] = gi;
      layer_of_output[node.outputs[0]] = static_cast<int>(grp.layers.size()) - 1;
    }
    int made = 0;
    for (const Group& grp : groups_)
      if (grp.layers.size() >= 2 && grp.layers.size() <= 8 && grp.weights <= kFusedMlpMaxWeights &&
          RowElems(grp) <= kFusedMlpMaxRowElems) {
        Fuse(grp);
        ++made;
      }
    if (made) RemoveMarkedNodes(&g_);
    return made;
  }

 private:
  bool Candidate(const Node& n, int64_t* k, int64_t* nn) const {
    if (n.op_type != "Gemm" || !n.domain.empty() || n.num_inputs() < 2 || n.outputs.size() != 1 ||
        n.outputs[0] < 0)
      return false;
    if (n.GetInt("transA", 0) != 0 || n.GetFloat("alpha", 1.f) != 1.f) return false;
    const int a = n.inputs[0], b = n.inputs[1], c = n.HasInput(2) ? n.inputs[2] : -1;
    if (a < 0 || b < 0 || static_[a] || !static_[b]) return false;
    const DType t = g_.values[a].dtype;
    if (!IsHalf(t) || g_.values[b].dtype != t || g_.values[n.outputs[0]].dtype != t) return false;
    if (!has_kernel_(OpId::kFusedMlp, t)) return false;
    // K and N from the weight (intermediate values need not carry shapes; the
    // op's shape inference checks A against it at plan time).
    int64_t b0 = 0, b1 = 0;
    if (!Dims2(g_.values[b], &b0, &b1) || b0 < 1) return false;
    const bool trans_b = n.GetInt("transB", 0) != 0;
    *k = trans_b ? b1 : b0;
    *nn = trans_b ? b0 : b1;
    const Value& av = g_.values[a];
    if (av.has_shape && (av.dims.size() != 2 || (av.dims[1].value >= 0 && av.dims[1].value != *k)))
      return false;
    if (*k > kFusedMlpMaxWidth || *nn > kFusedMlpMaxWidth) return false;
    if ((*nn + 7) / 8 * 8 * (Round16(*k) + 8) > kFusedMlpMaxStage) return false;
    if (c >= 0) {
      if (n.GetFloat("beta", 1.f) != 1.f || !static_[c] || g_.values[c].dtype != t) return false;
      const Value& cv = g_.values[c];
      if (!cv.has_shape || cv.dims.empty() || cv.dims.size() > 2 || cv.dims.back().value != *nn ||
          (cv.dims.size() == 2 && cv.dims[0].value != 1))
        return false;
    }
    return true;
  }

  // Elements per row of the kernel's row buffers: X and each layer another reads.
  static int64_t RowElems(const Group& grp) {
    int64_t k0 = grp.layers[0].k;
    for (const Layer& L : grp.layers)
      if (L.input < 0) k0 = L.k;
    int64_t elems = Round16(k0) + 8;
    std::vector<bool> read(grp.layers.size(), false);
    for (const Layer& L : grp.layers)
      if (L.input >= 0) read[L.input] = true;
    for (size_t l = 0; l < grp.layers.size(); ++l)
      if (read[l]) elems += Round16(grp.layers[l].n) + 8;
    return elems;
  }

  // A Cast node's float32 input when `v` is that cast's half output read by the group only.
  int FloatSourceOf(int v, int readers_in_group) const {
    const int p = producer_[v];
    if (p < 0 || IsGraphOutput(g_, v)) return -1;
    const Node& c = g_.nodes[p];
    if (c.op_type != "Cast" || c.inputs.empty() || c.inputs[0] < 0) return -1;
    if (g_.values[c.inputs[0]].dtype != DType::kFloat32) return -1;
    if (static_cast<int>(consumers_[v].size()) != readers_in_group) return -1;
    return p;
  }

  void Fuse(const Group& grp) {
    const DType t = grp.dtype;
    std::vector<bool> in_group(g_.nodes.size(), false);
    for (const Layer& L : grp.layers) in_group[L.node] = true;
    int x_readers = 0;
    for (const Layer& L : grp.layers) x_readers += L.input < 0 ? 1 : 0;
    Node f;
    f.op_type = "FusedMlp";
    f.domain = "kaiwu";
    f.name = g_.nodes[grp.layers[0].node].name + "/fused_mlp";
    f.opset = g_.opset;
    int x = grp.x;
    if (const int cast = FloatSourceOf(grp.x, x_readers); cast >= 0) {
      x = g_.nodes[cast].inputs[0];
      MarkRemoved(&g_.nodes[cast]);
    }
    f.inputs.push_back(x);
    std::vector<int64_t> inputs, trans_b, out_layers, out_dtypes;
    std::vector<float> params;
    Attribute acts;
    acts.kind = Attribute::Kind::kStrings;
    for (size_t l = 0; l < grp.layers.size(); ++l) {
      const Layer& L = grp.layers[l];
      const Node& n = g_.nodes[L.node];
      f.inputs.push_back(n.inputs[1]);
      f.inputs.push_back(n.HasInput(2) ? n.inputs[2] : -1);
      inputs.push_back(L.input);
      trans_b.push_back(n.GetInt("transB", 0) != 0 ? 1 : 0);
      acts.strings.push_back(n.GetString("_kaiwu_act", ""));
      const std::vector<float> p = n.GetFloats("_kaiwu_act_params", {0.f, 0.f});
      params.push_back(p.size() == 2 ? p[0] : 0.f);
      params.push_back(p.size() == 2 ? p[1] : 0.f);
      // The layer's output leaves the group when a node outside it or the graph reads it.
      const int y = n.outputs[0];
      int outside = IsGraphOutput(g_, y) ? 1 : 0;
      int cast_reader = -1;
      for (int c : consumers_[y])
        if (!in_group[c]) {
          ++outside;
          cast_reader = c;
        }
      if (!outside) continue;
      out_layers.push_back(static_cast<int64_t>(l));
      const Node* rc = cast_reader >= 0 ? &g_.nodes[cast_reader] : nullptr;
      if (outside == 1 && rc && rc->op_type == "Cast" && rc->GetInt("to", 0) == 1 && !rc->outputs.empty() &&
          rc->outputs[0] >= 0) {
        f.outputs.push_back(rc->outputs[0]);
        out_dtypes.push_back(1);
        MarkRemoved(&g_.nodes[cast_reader]);
      } else {
        f.outputs.push_back(y);
        out_dtypes.push_back(HalfCode(t));
      }
    }
    f.attrs["layer_inputs"] = IntsAttr(inputs);
    f.attrs["layer_trans_b"] = IntsAttr(trans_b);
    f.attrs["layer_acts"] = acts;
    Attribute pa;
    pa.kind = Attribute::Kind::kFloats;
    pa.floats = params;
    f.attrs["layer_act_params"] = pa;
    f.attrs["output_layers"] = IntsAttr(out_layers);
    f.attrs["output_dtypes"] = IntsAttr(out_dtypes);
    for (const Layer& L : grp.layers) MarkRemoved(&g_.nodes[L.node]);
    g_.nodes.push_back(std::move(f));
  }

  Graph& g_;
  const std::function<bool(OpId, DType)>& has_kernel_;
  std::vector<bool> static_;
  std::vector<std::vector<int>> consumers_;
  std::vector<int> producer_;
  std::vector<Group> groups_;
};

}  // namespace

int FuseMlp(Graph* g, const std::function<bool(OpId, DType)>& has_kernel) {
  return Fuser(g, has_kernel).Run();
}

}  // namespace kaiwu
