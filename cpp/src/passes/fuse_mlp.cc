#include "passes/fuse_mlp.h"

#include <map>
#include <string>
#include <vector>

#include "passes/match_util.h"
#include "passes/rewrite_util.h"

namespace kaiwu {
namespace {

int64_t Round16(int64_t v) { return (v + 15) / 16 * 16; }
int64_t HalfCode(DType t) { return t == DType::kFloat16 ? 10 : 16; }

// Known 2-D dims of a value, or false.
bool Dims2(const Value& v, int64_t* rows, int64_t* cols) {
  if (!v.has_shape || v.dims.size() != 2 || v.dims[1].value < 1) return false;
  *rows = v.dims[0].value;
  *cols = v.dims[1].value;
  return true;
}

// One dense layer as the graph has it: a 2-D Gemm; with `wide`, also a Gemm
// between fuse_matmul_add's flattening Reshapes ([.., K] -> [-1, K] -> Gemm ->
// [.., N], the Cast from float32 between the first Reshape and the Gemm or
// before it) or a MatMul of a static [K, N] followed by an Add of a static [N]
// bias, over X of any rank: `a` and `y` are the values the layer reads and
// writes with X's leading dims, `extra` the nodes that go with it.
struct Dense {
  int node = -1;        // the Gemm or MatMul
  int a = -1, y = -1;   // input and output as the group sees them
  int w = -1, b = -1;   // weight, bias (-1: none)
  bool trans_b = false;
  bool wide = false;    // not a plain 2-D Gemm
  int64_t k = 0, n = 0;
  std::vector<int> extra;
};

struct Layer {
  Dense d;
  int input = -1;  // -1: the group's X, else a layer index
};

struct Group {
  int x = -1;  // the value every first layer reads
  DType dtype = DType::kUndefined;
  std::vector<Layer> layers;
  int64_t weights = 0;
  bool wide = false;
};

class Fuser {
 public:
  Fuser(Graph* g, const std::function<bool(OpId, DType)>& has_kernel, bool wide)
      : g_(*g),
        has_kernel_(has_kernel),
        wide_(wide),
        static_(StaticValues(*g)),
        consumers_(g->Consumers()),
        producer_(Producers(*g)) {}

  int Run() {
    std::map<int, int> group_of_x, group_of_output, layer_of_output;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      Dense d;
      if (!Candidate(static_cast<int>(i), &d)) continue;
      const int a = d.a;
      const DType t = g_.values[d.w].dtype;
      int gi = -1, input = -1;
      if (auto it = group_of_output.find(a); it != group_of_output.end()) {
        gi = it->second;
        input = layer_of_output.at(a);
      } else if (auto jt = group_of_x.find(a); jt != group_of_x.end()) {
        gi = jt->second;
      } else {
        gi = static_cast<int>(groups_.size());
        groups_.push_back(Group{a, t, {}, 0, false});
        group_of_x[a] = gi;
      }
      Group& grp = groups_[gi];
      if (grp.dtype != t) continue;
      grp.weights += d.k * d.n;
      grp.wide = grp.wide || d.wide;
      const int y = d.y;
      grp.layers.push_back(Layer{std::move(d), input});
      group_of_output[y] = gi;
      layer_of_output[y] = static_cast<int>(grp.layers.size()) - 1;
    }
    int made = 0;
    for (const Group& grp : groups_)
      // A single layer only where it is wide: a GEMM, its bias kernel and the
      // Reshapes' casts become one launch (a 2-D Gemm is one GEMM and an epilogue).
      if (grp.layers.size() >= (grp.wide ? 1u : 2u) && grp.layers.size() <= 8 &&
          grp.weights <= kFusedMlpMaxWeights && RowElems(grp) <= kFusedMlpMaxRowElems) {
        Fuse(grp);
        ++made;
      }
    if (made) {
      RemoveMarkedNodes(&g_);
      g_.RemoveDeadNodes();  // the shape chains of removed Reshapes
    }
    return made;
  }

 private:
  int Consumers(int v) const { return static_cast<int>(consumers_[v].size()); }

  // The node producing `v` when it is `op` (default domain), else null.
  const Node* Producer(int v, const char* op) const {
    const int p = v >= 0 ? producer_[v] : -1;
    if (p < 0 || g_.nodes[p].op_type != op || !g_.nodes[p].domain.empty()) return nullptr;
    return &g_.nodes[p];
  }

  // A Reshape of X [.., K] (known rank > 2) to the constant [-1, K] producing `v`, read only once.
  const Node* Flatten(int v, int64_t k) const {
    const Node* r = Producer(v, "Reshape");
    std::vector<int64_t> shape;
    if (!r || r->num_inputs() != 2 || Consumers(v) != 1 || IsGraphOutput(g_, v) || r->inputs[0] < 0 ||
        !ConstInts(g_, r->inputs[1], &shape) || shape != std::vector<int64_t>{-1, k} ||
        KnownRank(g_, r->inputs[0]) <= 2)
      return nullptr;
    return r;
  }

  // fuse_matmul_add's way back: `y` read only by Reshape(y, Concat(Slice(Shape(x), 0, -1), [n])).
  int Unflatten(int y, int x, int64_t n, int* node) const {
    if (Consumers(y) != 1 || IsGraphOutput(g_, y)) return -1;
    const int r = consumers_[y][0];
    const Node& back = g_.nodes[r];
    if (back.op_type != "Reshape" || !back.domain.empty() || back.num_inputs() != 2 ||
        back.inputs[0] != y || back.outputs.size() != 1 || back.outputs[0] < 0)
      return -1;
    const Node* cat = Producer(back.inputs[1], "Concat");
    std::vector<int64_t> tail, start, end;
    if (!cat || cat->num_inputs() != 2 || !ConstInts(g_, cat->inputs[1], &tail) ||
        tail != std::vector<int64_t>{n})
      return -1;
    const Node* lead = Producer(cat->inputs[0], "Slice");
    if (!lead || lead->num_inputs() != 3 || !ConstInts(g_, lead->inputs[1], &start) ||
        !ConstInts(g_, lead->inputs[2], &end) || start != std::vector<int64_t>{0} ||
        end != std::vector<int64_t>{-1})
      return -1;
    const Node* shape = Producer(lead->inputs[0], "Shape");
    if (!shape || shape->inputs.empty() || shape->inputs[0] != x || shape->Has("start") || shape->Has("end"))
      return -1;
    *node = r;
    return back.outputs[0];
  }

  // The weight [K, N] or [N, K] (trans_b) of type t with its K and N, or false.
  bool Weight(int b, bool trans_b, DType t, int64_t* k, int64_t* nn) const {
    int64_t b0 = 0, b1 = 0;
    if (b < 0 || !static_[b] || g_.values[b].dtype != t || !Dims2(g_.values[b], &b0, &b1) || b0 < 1)
      return false;
    *k = trans_b ? b1 : b0;
    *nn = trans_b ? b0 : b1;
    if (*k > kFusedMlpMaxWidth || *nn > kFusedMlpMaxWidth) return false;
    return (*nn + 7) / 8 * 8 * (Round16(*k) + 8) <= kFusedMlpMaxStage;
  }

  // A static bias of N elements, [N] or [1, N], of type t.
  bool Bias(int c, DType t, int64_t nn) const {
    if (c < 0 || !static_[c] || g_.values[c].dtype != t) return false;
    const Value& cv = g_.values[c];
    return cv.has_shape && !cv.dims.empty() && cv.dims.size() <= 2 && cv.dims.back().value == nn &&
           (cv.dims.size() == 1 || cv.dims[0].value == 1);
  }

  bool Candidate(int i, Dense* d) const {
    const Node& n = g_.nodes[i];
    if (!n.domain.empty() || n.outputs.size() != 1 || n.outputs[0] < 0 || n.num_inputs() < 2) return false;
    if (n.op_type == "Gemm") return GemmCandidate(i, d);
    if (n.op_type == "MatMul" && wide_) return MatMulCandidate(i, d);
    return false;
  }

  bool GemmCandidate(int i, Dense* d) const {
    const Node& n = g_.nodes[i];
    if (n.GetInt("transA", 0) != 0 || n.GetFloat("alpha", 1.f) != 1.f) return false;
    const int a = n.inputs[0], c = n.HasInput(2) ? n.inputs[2] : -1;
    if (a < 0 || static_[a]) return false;
    const DType t = g_.values[a].dtype;
    if (!IsHalf(t) || g_.values[n.outputs[0]].dtype != t) return false;
    if (!has_kernel_(OpId::kFusedMlp, t)) return false;
    // K and N from the weight (intermediate values need not carry shapes; the
    // op's shape inference checks A against it at plan time).
    d->trans_b = n.GetInt("transB", 0) != 0;
    if (!Weight(n.inputs[1], d->trans_b, t, &d->k, &d->n)) return false;
    const Value& av = g_.values[a];
    if (av.has_shape && (av.dims.size() != 2 || (av.dims[1].value >= 0 && av.dims[1].value != d->k)))
      return false;
    if (c >= 0 && (n.GetFloat("beta", 1.f) != 1.f || !Bias(c, t, d->n))) return false;
    d->node = i;
    d->a = a;
    d->y = n.outputs[0];
    d->w = n.inputs[1];
    d->b = c;
    if (!wide_) return true;
    // Between fuse_matmul_add's Reshapes: Reshape -> Gemm, or Reshape -> Cast -> Gemm.
    const Node* flat = Flatten(a, d->k);
    const Node* cast = nullptr;
    if (!flat && (cast = Producer(a, "Cast")) && Consumers(a) == 1 && !IsGraphOutput(g_, a) &&
        cast->inputs[0] >= 0 && g_.values[cast->inputs[0]].dtype == DType::kFloat32)
      flat = Flatten(cast->inputs[0], d->k);
    if (!flat) return true;
    int back = -1;
    const int y = Unflatten(d->y, flat->inputs[0], d->n, &back);
    if (y < 0) return true;
    d->a = flat->inputs[0];
    d->y = y;
    d->wide = true;
    d->extra = {producer_[flat->outputs[0]], back};
    if (cast) d->extra.push_back(producer_[a]);
    return true;
  }

  // MatMul(A, W [K, N]) read only by Add(it, B [N]) (either order), A of any rank but 0.
  bool MatMulCandidate(int i, Dense* d) const {
    const Node& n = g_.nodes[i];
    const int a = n.inputs[0], mm = n.outputs[0];
    if (n.num_inputs() != 2 || n.Has("_kaiwu_act") || a < 0 || static_[a]) return false;
    const DType t = g_.values[a].dtype;
    if (!IsHalf(t) || g_.values[mm].dtype != t || !has_kernel_(OpId::kFusedMlp, t)) return false;
    if (KnownRank(g_, a) == 0 || KnownRank(g_, a) == 1) return false;  // unknown rank: checked at plan time
    if (!Weight(n.inputs[1], false, t, &d->k, &d->n)) return false;
    if (Consumers(mm) != 1 || IsGraphOutput(g_, mm)) return false;
    const int ai = consumers_[mm][0];
    const Node& add = g_.nodes[ai];
    if (add.op_type != "Add" || !add.domain.empty() || add.num_inputs() != 2 || add.outputs.size() != 1 ||
        add.outputs[0] < 0 || g_.values[add.outputs[0]].dtype != t)
      return false;
    const int bias = add.inputs[0] == mm ? add.inputs[1] : add.inputs[0];
    if (add.inputs[0] == add.inputs[1] || !Bias(bias, t, d->n)) return false;
    d->node = i;
    d->a = a;
    d->y = add.outputs[0];
    d->w = n.inputs[1];
    d->b = bias;
    d->wide = true;
    d->extra = {ai};
    return true;
  }

  // Elements per row of the kernel's row buffers: X and each layer another reads.
  static int64_t RowElems(const Group& grp) {
    int64_t k0 = grp.layers[0].d.k;
    for (const Layer& L : grp.layers)
      if (L.input < 0) k0 = L.d.k;
    int64_t elems = Round16(k0) + 8;
    std::vector<bool> read(grp.layers.size(), false);
    for (const Layer& L : grp.layers)
      if (L.input >= 0) read[L.input] = true;
    for (size_t l = 0; l < grp.layers.size(); ++l)
      if (read[l]) elems += Round16(grp.layers[l].d.n) + 8;
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
    for (const Layer& L : grp.layers) {
      in_group[L.d.node] = true;
      for (int e : L.d.extra) in_group[e] = true;
    }
    int x_readers = 0;
    for (const Layer& L : grp.layers) x_readers += L.input < 0 ? 1 : 0;
    Node f;
    f.op_type = "FusedMlp";
    f.domain = "kaiwu";
    f.name = g_.nodes[grp.layers[0].d.node].name + "/fused_mlp";
    f.opset = g_.opset;
    int x = grp.x;
    if (g_.values[x].dtype != DType::kFloat32)
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
      const Node& n = g_.nodes[L.d.node];
      f.inputs.push_back(L.d.w);
      f.inputs.push_back(L.d.b);
      inputs.push_back(L.input);
      trans_b.push_back(L.d.trans_b ? 1 : 0);
      acts.strings.push_back(n.GetString("_kaiwu_act", ""));
      const std::vector<float> p = n.GetFloats("_kaiwu_act_params", {0.f, 0.f});
      params.push_back(p.size() == 2 ? p[0] : 0.f);
      params.push_back(p.size() == 2 ? p[1] : 0.f);
      // The layer's output leaves the group when a node outside it or the graph reads it.
      const int y = L.d.y;
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
    if (grp.wide)
      f.attrs["max_rows"] = IntAttr(grp.layers.size() == 1 ? kFusedMlpWideSingleMaxRows : kFusedMlpWideMaxRows);
    for (const Layer& L : grp.layers) {
      MarkRemoved(&g_.nodes[L.d.node]);
      for (int e : L.d.extra) MarkRemoved(&g_.nodes[e]);
    }
    g_.nodes.push_back(std::move(f));
  }

  Graph& g_;
  const std::function<bool(OpId, DType)>& has_kernel_;
  const bool wide_;
  std::vector<bool> static_;
  std::vector<std::vector<int>> consumers_;
  std::vector<int> producer_;
  std::vector<Group> groups_;
};

}  // namespace

int FuseMlp(Graph* g, const std::function<bool(OpId, DType)>& has_kernel, bool wide) {
  return Fuser(g, has_kernel, wide).Run();
}

}  // namespace kaiwu
