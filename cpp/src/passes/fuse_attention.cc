#include "passes/fuse_attention.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/half.h"
#include "ops/view_chain.h"
#include "passes/match_util.h"
#include "passes/rewrite_util.h"

namespace kaiwu {
namespace {

// op in the default domain, with nothing fused into it (an activation a pass
// folded in would be lost: FusedAttention has none).
bool Is(const Node& n, const char* op) {
  return n.op_type == op && n.domain.empty() && n.GetString("_kaiwu_act", "").empty() &&
         !n.Has("_kaiwu_input_relu");
}

class AttentionFuser {
 public:
  AttentionFuser(Graph* g, const std::function<bool(OpId, DType)>& has_kernel, bool views)
      : g_(*g), has_kernel_(has_kernel), views_(views), uses_(UseCounts(*g)) {}

  int Run() {
    if (!has_kernel_(OpId::kFusedAttention, DType::kFloat32) &&
        !has_kernel_(OpId::kFusedAttention, DType::kFloat16))
      return 0;
    int made = 0;
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      if (Is(g_.nodes[i], "Softmax") && TryFuse(static_cast<int>(i))) ++made;
    if (made) RemoveMarkedNodes(&g_);
    return made;
  }

 private:
  // The one node reading v (v no graph output), or -1.
  int SoleReader(int v) const { return kaiwu::SoleReader(g_, uses_, v); }

  int Producer(int v) const { return v >= 0 ? g_.values[v].producer : -1; }

  // A float32 constant of one element (not a weight: a refit could change it),
  // or a Cast of one to float16 / bfloat16 (a half session's scalar): its value
  // as the Cast rounds it.
  bool ConstScalar(int v, float* out) const {
    if (v < 0) return false;
    if (g_.values[v].kind != ValueKind::kConstant || !g_.values[v].data) {
      const int p = g_.values[v].producer;
      if (p < 0 || !Is(g_.nodes[p], "Cast") || g_.nodes[p].num_inputs() != 1) return false;
      const int64_t to = g_.nodes[p].GetInt("to", 0);  // ONNX codes: 10 float16, 16 bfloat16
      float c = 0.f;
      const int from = g_.nodes[p].inputs[0];
      if ((to != 10 && to != 16) || from < 0 || g_.values[from].kind != ValueKind::kConstant ||
          !ConstScalar(from, &c))
        return false;
      *out = to == 10 ? HalfToFloat(FloatToHalf(c)) : BFloat16ToFloat(FloatToBFloat16(c));
      return std::isfinite(*out);
    }
    const Tensor& t = *g_.values[v].data;
    if (t.dtype() != DType::kFloat32 || t.size() != 1) return false;
    *out = t.As<float>()[0];
    return std::isfinite(*out);
  }

  // The MatMul making v, directly or through a Mul / Div by a constant scalar
  // (the scores' 1 / sqrt(d)), each read only by the next; -1 if none.
  int ScoresMatMul(int v, int reader, float* scale, int* scale_node) const {
    *scale = 1.f;
    *scale_node = -1;
    int p = Producer(v);
    if (p < 0 || SoleReader(v) != reader) return -1;
    if (Is(g_.nodes[p], "Mul") || Is(g_.nodes[p], "Div")) {
      const Node& n = g_.nodes[p];
      if (n.num_inputs() != 2) return -1;
      float c = 0.f;
      int from = -1;
      if (ConstScalar(n.inputs[1], &c)) {
        from = n.inputs[0];
      } else if (n.op_type == "Mul" && ConstScalar(n.inputs[0], &c)) {
        from = n.inputs[1];
      } else {
        return -1;
      }
      if (n.op_type == "Div") {
        if (c == 0.f) return -1;
        c = 1.f / c;
      }
      *scale = c;
      *scale_node = p;
      const int mm = Producer(from);
      if (mm < 0 || SoleReader(from) != p) return -1;
      p = mm;
    }
    return Is(g_.nodes[p], "MatMul") ? p : -1;
  }

  // *x = Mul(y, c) read only by `reader`, c a one-element value computed from
  // shapes and constants (known when the plan is made): *x = y, *scale = c,
  // *mul = the Mul. Else nothing changes.
  void PeelScale(int* x, int reader, int* scale, int* mul) {
    const int p = Producer(*x);
    if (p < 0 || !Is(g_.nodes[p], "Mul") || g_.nodes[p].num_inputs() != 2 || SoleReader(*x) != reader) return;
    const Node& n = g_.nodes[p];
    for (int side = 0; side < 2; ++side) {
      const int y = n.inputs[side], c = n.inputs[1 - side];
      const int ry = Rank(y, 0), rc = Rank(c, 0);  // c must not add dims to y
      if (y < 0 || ry < 2 || rc < 0 || rc > ry || !PlanScalar(c, 0)) continue;
      *x = y;
      *scale = c;
      *mul = p;
      return;
    }
  }

  // v holds one element and is known when the plan is made: a structural
  // constant, or made from Shape / Size and such values by shape-free ops.
  bool PlanScalar(int v, int depth) {
    return v >= 0 && depth < 64 && OneElement(v, depth) && PlanKnown(v, depth);
  }

  bool PlanKnown(int v, int depth) {
    if (v < 0 || depth > 64) return false;
    const Value& val = g_.values[v];
    if (val.kind == ValueKind::kConstant) return val.data != nullptr;
    if (val.kind != ValueKind::kRuntime || val.producer < 0) return false;
    const Node& n = g_.nodes[val.producer];
    const bool elementwise = n.domain == "kaiwu" && n.op_type == "FusedElementwise";
    if ((!n.domain.empty() && !elementwise) || n.op_type.rfind("Random", 0) == 0) return false;
    if (n.op_type == "Shape" || n.op_type == "Size") return true;
    for (int in : n.inputs)
      if (in >= 0 && !PlanKnown(in, depth + 1)) return false;
    return n.num_inputs() > 0;
  }

  bool OneElement(int v, int depth) {
    if (v < 0 || depth > 64) return false;
    const Value& val = g_.values[v];
    if (val.data) return val.data->size() == 1;
    if (val.producer < 0) return false;
    const Node& n = g_.nodes[val.producer];
    if (n.domain == "kaiwu" && n.op_type == "FusedElementwise") {  // shaped as its inputs broadcast
      for (int in : n.inputs)
        if (in >= 0 && !OneElement(in, depth + 1)) return false;
      return n.num_inputs() > 0;
    }
    if (!n.domain.empty()) return false;
    static const char* kUnary[] = {"Cast", "Sqrt", "Reciprocal", "Neg", "Abs", "Exp", "Log",
                                   "Identity", "Reshape", "Squeeze", "Unsqueeze"};
    for (const char* op : kUnary)
      if (n.op_type == op) return OneElement(n.inputs[0], depth + 1);
    if (n.op_type == "Add" || n.op_type == "Sub" || n.op_type == "Mul" || n.op_type == "Div" ||
        n.op_type == "Pow")
      return n.num_inputs() == 2 && OneElement(n.inputs[0], depth + 1) && OneElement(n.inputs[1], depth + 1);
    if (n.op_type == "Slice") return Length(v, depth + 1) == 1;
    return false;
  }

  bool TryFuse(int sm) {
    const Node& softmax = g_.nodes[sm];
    const bool legacy = softmax.opset > 0 && softmax.opset < 13;
    if (softmax.GetInt("axis", legacy ? 1 : -1) != -1 || softmax.num_inputs() != 1) return false;
    // Scores: [scale *] MatMul(Q, K), or Add(that, mask) in either order.
    float scale = 1.f;
    int scale_node = -1, add = -1, mask = -1;
    int scores = ScoresMatMul(softmax.inputs[0], sm, &scale, &scale_node);
    const int p = Producer(softmax.inputs[0]);
    if (scores < 0 && p >= 0 && Is(g_.nodes[p], "Add") && g_.nodes[p].num_inputs() == 2 &&
        SoleReader(softmax.inputs[0]) == sm) {
      add = p;
      const Node& a = g_.nodes[add];
      for (int side = 0; side < 2 && scores < 0; ++side) {
        scores = ScoresMatMul(a.inputs[side], add, &scale, &scale_node);
        if (scores >= 0) mask = a.inputs[1 - side];
      }
    }
    if (scores < 0) return false;
    const Node& qk = g_.nodes[scores];
    const int out_mm = SoleReader(softmax.outputs[0]);
    if (qk.num_inputs() != 2 || out_mm < 0 || !Is(g_.nodes[out_mm], "MatMul")) return false;
    const Node& pv = g_.nodes[out_mm];
    if (pv.num_inputs() != 2 || pv.inputs[0] != softmax.outputs[0] || pv.Has("_kaiwu_trans_b")) return false;
    int q = qk.inputs[0], k = qk.inputs[1];
    const int v = pv.inputs[1];
    for (int x : {q, k, v})
      if (Rank(x, 0) < 2) return false;
    // Q and K each times a scalar computed from shapes (scaled dot-product
    // attention's export: both by sqrt(1 / sqrt(d))): the node's scale inputs.
    int q_scale = -1, k_scale = -1, q_mul = -1, k_mul = -1;
    PeelScale(&q, scores, &q_scale, &q_mul);
    PeelScale(&k, scores, &k_scale, &k_mul);
    if (q == k) return false;  // one Mul feeding both sides
    // One dtype for all, as far as the values carry one (a half session's do; else
    // float32), with a kernel for it.
    DType t = DType::kUndefined;
    for (int x : {pv.outputs[0], q, k, v, mask}) {
      const DType dx = x >= 0 ? g_.values[x].dtype : DType::kUndefined;
      if (dx == DType::kUndefined) continue;
      if (t != DType::kUndefined && dx != t) return false;
      t = dx;
    }
    if (!has_kernel_(OpId::kFusedAttention, t == DType::kUndefined ? DType::kFloat32 : t)) return false;

    Node f;
    f.op_type = "FusedAttention";
    f.domain = "kaiwu";
    f.opset = 1;
    f.name = softmax.name + "_attention";
    f.inputs = {q, k, v};
    if (mask >= 0 || q_scale >= 0 || k_scale >= 0) f.inputs.push_back(mask);
    if (q_scale >= 0 || k_scale >= 0) f.inputs.insert(f.inputs.end(), {q_scale, k_scale});
    f.outputs = {pv.outputs[0]};
    if (qk.GetInt("_kaiwu_trans_b", 0) != 0) f.attrs["k_trans"] = IntAttr(1);
    if (scale != 1.f) {
      Attribute a;
      a.kind = Attribute::Kind::kFloat;
      a.f = scale;
      f.attrs["scale"] = a;
    }
    // Q, K and V made by layout ops from another tensor: the recipe, which the
    // op layer composes into a view when the plan's shapes allow (the ops stay in
    // the graph for the plans where they do not; those where they do drop them).
    static const char* kViewAttr[] = {"q_view", "k_view", "v_view"};
    for (int slot = 0; slot < 3 && views_; ++slot) {
      f.inputs.resize(std::max<size_t>(f.inputs.size(), 9), -1);  // 6-8: the views' tensors
      std::vector<int64_t> recipe;
      const int base = ViewChain(f.inputs[slot], &f.inputs, &recipe);
      if (base < 0) continue;
      f.inputs[6 + slot] = base;
      f.attrs[kViewAttr[slot]] = IntsAttr(recipe);
    }
    while (f.inputs.size() > 3 && f.inputs.back() < 0) f.inputs.pop_back();
    // A Transpose keeping the last axis last, Y's only reader: the node writes
    // its layout (torch's heads back to [L, B, H, d] before the output projection).
    const int tr = SoleReader(pv.outputs[0]);
    if (tr >= 0 && Is(g_.nodes[tr], "Transpose") && g_.nodes[tr].Has("perm") &&
        g_.nodes[tr].outputs.size() == 1 && g_.nodes[tr].outputs[0] >= 0) {
      const std::vector<int64_t> perm = g_.nodes[tr].GetInts("perm");
      if (!perm.empty() && perm.back() == static_cast<int64_t>(perm.size()) - 1) {
        f.attrs["y_perm"] = IntsAttr(perm);
        f.outputs = {g_.nodes[tr].outputs[0]};
        MarkRemoved(&g_.nodes[tr]);
      }
    }
    // In the place of the last MatMul: every input is made before it.
    MarkRemoved(&g_.nodes[scores]);
    if (scale_node >= 0) MarkRemoved(&g_.nodes[scale_node]);
    if (add >= 0) MarkRemoved(&g_.nodes[add]);
    for (int mul : {q_mul, k_mul})
      if (mul >= 0) MarkRemoved(&g_.nodes[mul]);
    MarkRemoved(&g_.nodes[sm]);
    g_.nodes[out_mm] = std::move(f);
    return true;
  }

  // The layout ops (Transpose, Reshape, Squeeze, Unsqueeze, Gather of one
  // constant index) that make x from another tensor: that tensor (-1 if none),
  // and the recipe from it to x (ops/view_chain.h). A Reshape's target is
  // appended to `node_inputs` (the fused node's) and its record names that input.
  // Their results may have other readers: a plan drops the ops' steps only where
  // nothing that runs reads them (q, k and v's common transpose once all three
  // read through views).
  int ViewChain(int x, std::vector<int>* node_inputs, std::vector<int64_t>* recipe) {
    std::vector<std::vector<int64_t>> records;  // from x back
    int cur = x;
    for (int depth = 0; depth < 16; ++depth) {
      const int p = Producer(cur);
      if (p < 0) break;
      const Node& n = g_.nodes[p];
      if (!n.domain.empty() || n.outputs.size() != 1 || n.num_inputs() < 1 || n.inputs[0] < 0) break;
      std::vector<int64_t> rec;
      if (n.op_type == "Transpose" && n.Has("perm")) {
        const std::vector<int64_t> perm = n.GetInts("perm");
        rec = {static_cast<int64_t>(ViewStep::kTranspose), static_cast<int64_t>(perm.size())};
        rec.insert(rec.end(), perm.begin(), perm.end());
      } else if (n.op_type == "Reshape" && n.num_inputs() == 2 && n.inputs[1] >= 0 &&
                 n.GetInt("allowzero", 0) == 0) {
        rec = {static_cast<int64_t>(ViewStep::kReshape), static_cast<int64_t>(node_inputs->size())};
        node_inputs->push_back(n.inputs[1]);
      } else if (n.op_type == "Squeeze" || n.op_type == "Unsqueeze") {
        std::vector<int64_t> axes;
        if (n.Has("axes")) axes = n.GetInts("axes");
        else if (n.num_inputs() < 2 || !ConstInts(g_, n.inputs[1], &axes)) break;
        if (axes.empty()) break;  // Squeeze of every unit dim: needs the shape
        rec = {static_cast<int64_t>(n.op_type == "Squeeze" ? ViewStep::kSqueeze : ViewStep::kUnsqueeze),
               static_cast<int64_t>(axes.size())};
        rec.insert(rec.end(), axes.begin(), axes.end());
      } else if (n.op_type == "Gather" && n.num_inputs() == 2) {
        const int idx = n.inputs[1];
        std::vector<int64_t> index;
        if (idx < 0 || g_.values[idx].kind != ValueKind::kConstant || !g_.values[idx].data ||
            !g_.values[idx].data->shape().empty() || !ConstInts(g_, idx, &index) || index.size() != 1)
          break;
        rec = {static_cast<int64_t>(ViewStep::kGather), n.GetInt("axis", 0), index[0]};
      } else {
        break;
      }
      records.push_back(std::move(rec));
      cur = n.inputs[0];
    }
    if (records.empty()) return -1;
    recipe->clear();
    for (auto it = records.rbegin(); it != records.rend(); ++it) recipe->insert(recipe->end(), it->begin(), it->end());
    return cur;
  }

  // The rank of v where its producers say it, else -1.
  int Rank(int v, int depth) {
    if (v < 0) return -1;
    if (auto it = rank_.find(v); it != rank_.end()) return it->second;
    int r = -1;
    const Value& val = g_.values[v];
    if (val.data) r = static_cast<int>(val.data->shape().size());
    else if (val.has_shape) r = static_cast<int>(val.dims.size());
    else if (val.producer >= 0 && depth < 64) r = ProducedRank(g_.nodes[val.producer], depth + 1);
    rank_[v] = r;
    return r;
  }

  // The element count of a 1-D integer value (a shape, Unsqueeze's axes) where
  // its producers say it, else -1: a constant, Shape(x) (x's rank), a Concat of
  // such, a scalar unsqueezed, a Cast of one.
  int Length(int v, int depth) {
    if (v < 0 || depth > 64) return -1;
    if (auto it = length_.find(v); it != length_.end()) return it->second;
    int len = -1;
    const Value& val = g_.values[v];
    if (val.data) {
      const Shape& s = val.data->shape();
      if (s.size() == 1) len = static_cast<int>(s[0]);
    } else if (val.producer >= 0) {
      const Node& n = g_.nodes[val.producer];
      if (!n.domain.empty()) {
        len = -1;
      } else if (n.op_type == "Shape" && !n.Has("start") && !n.Has("end")) {
        len = Rank(n.inputs[0], depth + 1);
      } else if (n.op_type == "Concat") {
        len = 0;
        for (int in : n.inputs) {
          const int l = Length(in, depth + 1);
          if (l < 0) {
            len = -1;
            break;
          }
          len += l;
        }
      } else if (n.op_type == "Unsqueeze") {
        const int r = Rank(n.inputs[0], depth + 1);
        if (r == 0) len = 1;
      } else if (n.op_type == "Cast" || n.op_type == "Identity") {
        len = Length(n.inputs[0], depth + 1);
      } else if (n.op_type == "Slice" && n.num_inputs() >= 3 && n.num_inputs() <= 5) {
        len = SliceLength(n, depth + 1);
      }
    }
    length_[v] = len;
    return len;
  }

  // A 1-D Slice with constant starts / ends (steps 1): fuse_matmul_add's
  // Shape(x)[:-1] for the Reshape back to x's leading dims.
  int SliceLength(const Node& n, int depth) {
    const int total = Length(n.inputs[0], depth);
    int64_t start = 0, end = 0;
    if (total < 0 || !ConstInt(n.inputs[1], &start) || !ConstInt(n.inputs[2], &end)) return -1;
    int64_t step = 1, axis = 0;
    if (n.num_inputs() >= 4 && n.inputs[3] >= 0 && (!ConstInt(n.inputs[3], &axis) || (axis != 0 && axis != -1)))
      return -1;
    if (n.num_inputs() >= 5 && n.inputs[4] >= 0 && (!ConstInt(n.inputs[4], &step) || step != 1)) return -1;
    const int64_t len = total;
    auto clamp = [len](int64_t x) { return std::min(std::max(x < 0 ? x + len : x, int64_t{0}), len); };
    return static_cast<int>(std::max(int64_t{0}, clamp(end) - clamp(start)));
  }

  // A constant integer of one element.
  bool ConstInt(int v, int64_t* out) const {
    if (v < 0 || !g_.values[v].data) return false;
    const Tensor& t = *g_.values[v].data;
    if (t.size() != 1) return false;
    if (t.dtype() == DType::kInt64) *out = t.As<int64_t>()[0];
    else if (t.dtype() == DType::kInt32) *out = t.As<int32_t>()[0];
    else return false;
    return true;
  }

  int ProducedRank(const Node& n, int depth) {
    const std::string& op = n.op_type;
    if (n.domain == "kaiwu") {
      // Dense layers keep their input's leading dims.
      if (op == "PackedGemm" || op == "FusedMlp") return Rank(n.inputs[0], depth);
      if (op != "FusedElementwise" && op != "FusedAttention") return -1;
    } else if (!n.domain.empty()) {
      return -1;
    }
    if (op == "Shape") return 1;
    if (op == "Gemm") return 2;
    if (op == "Transpose") {
      if (n.Has("perm")) return static_cast<int>(n.GetInts("perm").size());
      return Rank(n.inputs[0], depth);
    }
    if (op == "Reshape") return n.num_inputs() >= 2 ? Length(n.inputs[1], depth) : -1;
    if (op == "ConstantOfShape") return Length(n.inputs[0], depth);
    if (op == "Expand") {
      const int a = Rank(n.inputs[0], depth), b = n.num_inputs() >= 2 ? Length(n.inputs[1], depth) : -1;
      return a >= 0 && b >= 0 ? std::max(a, b) : -1;
    }
    if (op == "Gather") {
      const int a = Rank(n.inputs[0], depth), b = n.num_inputs() >= 2 ? Rank(n.inputs[1], depth) : -1;
      return a >= 1 && b >= 0 ? a - 1 + b : -1;
    }
    if (op == "Unsqueeze" || op == "Squeeze") {
      const int in = Rank(n.inputs[0], depth);
      const int axes = n.Has("axes") ? static_cast<int>(n.GetInts("axes").size())
                                      : (n.num_inputs() >= 2 ? Length(n.inputs[1], depth) : -1);
      if (in < 0 || axes < 0) return -1;
      return op == "Unsqueeze" ? in + axes : in - axes;
    }
    if (op == "MatMul") {
      const int a = Rank(n.inputs[0], depth), b = Rank(n.inputs[1], depth);
      return a >= 2 && b >= 2 ? std::max(a, b) : -1;
    }
    static const char* kSameRank[] = {"Cast", "Relu", "Sigmoid", "Tanh", "Softmax", "LayerNormalization",
                                      "Identity", "Slice", "Concat", "Neg", "Sqrt", "Erf", "Gelu"};
    for (const char* s : kSameRank)
      if (op == s) return Rank(n.inputs[0], depth);
    // FusedAttention (an earlier block's): Y's rank is its inputs' largest.
    static const char* kBroadcast[] = {"Add", "Sub", "Mul", "Div", "Where", "FusedElementwise", "FusedAttention"};
    for (const char* s : kBroadcast) {
      if (op != s) continue;
      int r = 0;
      // FusedAttention: Q, K, V and the mask (its later inputs are scales, the
      // tensors its views start from and their shapes).
      const int count = op == std::string("FusedAttention") ? std::min(4, n.num_inputs()) : n.num_inputs();
      for (int i = 0; i < count; ++i) {
        const int in = n.inputs[i];
        if (in < 0) continue;
        const int ri = Rank(in, depth);
        if (ri < 0) return -1;
        r = std::max(r, ri);
      }
      return r;
    }
    return -1;
  }

  Graph& g_;
  const std::function<bool(OpId, DType)>& has_kernel_;
  const bool views_;
  std::vector<int> uses_;
  std::map<int, int> rank_, length_;
};

}  // namespace

int FuseAttention(Graph* g, const std::function<bool(OpId, DType)>& has_kernel, bool views) {
  const int made = AttentionFuser(g, has_kernel, views).Run();
  if (made) {
    g->RemoveDeadNodes();  // a half Cast of a folded scale
    g->Verify();
  }
  return made;
}

}  // namespace kaiwu
