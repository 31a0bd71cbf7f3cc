// DQ(x), DQ(w) -> Conv/Gemm/MatMul (+bias, +fused activation) [-> Q] becomes
// one integer node: kaiwu QLinearFused(x, QPackWeights(w, scales, zero
// points, bias)), uint8 x int8 products accumulated in int32 with a
// requantize epilogue (or a float output when no Q follows). QPackWeights is
// an ordinary node over the original weights, so the static program packs
// them at load and again after every refit (int8 weights and scales refit by
// name; fp32 weights behind a QuantizeLinear are re-quantized first).
// Conditions: x per tensor, uint8 or int8; w int8, per tensor or per output
// channel; Conv with group 1; Gemm with transA 0, alpha 1, beta 1 and a bias
// of n elements; Q per tensor; static scales and zero points.
#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {
namespace {

struct Dq {
  int x = -1, scale = -1, zp = -1;
  DType dtype = DType::kUndefined;
  int64_t axis = 1;
  int64_t scale_size = 0;
};

bool KnownShape(const Graph& g, const std::vector<int>& producer, int v, std::vector<int64_t>* out) {
  for (int hops = 0; hops < 4 && v >= 0; ++hops) {
    const Value& val = g.values[v];
    if (val.has_shape) {
      out->clear();
      for (const Dim& d : val.dims) {
        if (d.value < 0) return false;
        out->push_back(d.value);
      }
      return true;
    }
    const int p = producer[v];
    if (p < 0) return false;
    const Node& n = g.nodes[p];  // Q and DQ keep the shape of their input
    if (n.op_type != "QuantizeLinear" && n.op_type != "DequantizeLinear") return false;
    v = n.inputs[0];
  }
  return false;
}

int64_t Numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// v written by a DequantizeLinear with static scale and zero point (no blocks).
bool AsDq(const Graph& g, const std::vector<int>& producer, const std::vector<bool>& st, int v, Dq* dq) {
  if (v < 0 || producer[v] < 0) return false;
  const Node& n = g.nodes[producer[v]];
  if (n.op_type != "DequantizeLinear" || !n.domain.empty() || n.GetInt("block_size", 0) != 0) return false;
  if (!n.HasInput(1) || !st[n.inputs[1]]) return false;
  dq->x = n.inputs[0];
  dq->scale = n.inputs[1];
  dq->zp = n.HasInput(2) ? n.inputs[2] : -1;
  if (dq->zp >= 0 && !st[dq->zp]) return false;
  dq->dtype = dq->zp >= 0 ? g.values[dq->zp].dtype : g.values[dq->x].dtype;
  std::vector<int64_t> s;
  if (!KnownShape(g, producer, dq->scale, &s)) return false;
  dq->scale_size = Numel(s);
  dq->axis = n.GetInt("axis", 1);
  return g.values[dq->scale].dtype == DType::kFloat32 || g.values[dq->scale].dtype == DType::kUndefined;
}

}  // namespace

int FuseQdq(Graph* g) {
  int fired = 0;
  const std::vector<int> uses = UseCounts(*g);
  const std::vector<bool> st = StaticValues(*g);
  const std::vector<int> producer = Producers(*g);
  const std::vector<std::vector<int>> consumers = g->Consumers();
  const size_t original = g->nodes.size();
  for (size_t i = 0; i < original; ++i) {
    const Node& op = g->nodes[i];
    const bool conv = op.op_type == "Conv", gemm = op.op_type == "Gemm", matmul = op.op_type == "MatMul";
    if (!op.domain.empty() || !(conv || gemm || matmul) || op.outputs.size() != 1) continue;
    Dq dx, dw;
    if (!AsDq(*g, producer, st, op.inputs[0], &dx) || !AsDq(*g, producer, st, op.inputs[1], &dw)) continue;
    if (st[dx.x] || !st[dw.x]) continue;  // runtime activations, static weights
    if (dx.scale_size != 1 || (dx.dtype != DType::kUInt8 && dx.dtype != DType::kInt8)) continue;
    if (dw.dtype != DType::kInt8) continue;
    std::vector<int64_t> wshape;
    if (!KnownShape(*g, producer, dw.x, &wshape) || wshape.size() < 2) continue;
    bool trans = true;
    if (conv) {
      if (op.GetInt("group", 1) != 1 || wshape.size() < 3 || wshape.size() > 5) continue;
    } else if (gemm) {
      if (op.GetInt("transA", 0) != 0 || op.GetFloat("alpha", 1.f) != 1.f || wshape.size() != 2) continue;
      if (op.HasInput(2) && op.GetFloat("beta", 1.f) != 1.f) continue;
      trans = op.GetInt("transB", 0) != 0;
    } else {
      if (wshape.size() != 2 || op.num_inputs() != 2) continue;
      trans = false;
    }
    const int64_t n = trans ? wshape[0] : wshape[1];
    const int64_t k = trans ? Numel(wshape) / n : wshape[0];
    const int64_t out_axis = trans ? 0 : 1, rank = static_cast<int64_t>(wshape.size());
    const int64_t w_axis = dw.axis < 0 ? dw.axis + rank : dw.axis;
    if (dw.scale_size != 1 && !(dw.scale_size == n && w_axis == out_axis)) continue;
    int bias = -1;
    if (op.HasInput(2)) {
      std::vector<int64_t> bshape;
      if (!st[op.inputs[2]] || !KnownShape(*g, producer, op.inputs[2], &bshape) || Numel(bshape) != n) continue;
      if (gemm && bshape.size() == 2 && bshape[0] != 1) continue;
      bias = op.inputs[2];
    }
    // A per-tensor QuantizeLinear as the only reader of the output: fold it in.
    const int y = op.outputs[0];
    int q_node = -1, ys = -1, yz = -1, out = y;
    int64_t y_dtype = 1;
    if (uses[y] == 1 && !IsGraphOutput(*g, y) && consumers[y].size() == 1) {
      const Node& q = g->nodes[consumers[y][0]];
      std::vector<int64_t> s;
      if (q.op_type == "QuantizeLinear" && q.domain.empty() && q.inputs[0] == y && q.HasInput(1) &&
          st[q.inputs[1]] && KnownShape(*g, producer, q.inputs[1], &s) && Numel(s) == 1 &&
          (!q.HasInput(2) || st[q.inputs[2]]) && q.GetInt("output_dtype", 0) == 0) {
        const DType qd = q.HasInput(2) ? g->values[q.inputs[2]].dtype : DType::kUInt8;
        if (qd == DType::kUInt8 || qd == DType::kInt8) {
          q_node = consumers[y][0];
          ys = q.inputs[1];
          yz = q.HasInput(2) ? q.inputs[2] : -1;
          out = q.outputs[0];
          y_dtype = qd == DType::kUInt8 ? 2 : 3;
        }
      }
    }
    const std::string base = op.name.empty() ? "qfused" : op.name;
    const int packed = AddOp(g, "QPackWeights", {dw.x, dw.scale, dw.zp, dx.scale, dx.zp, bias, ys, yz},
                             base + "_qpacked");
    Node& pack = g->nodes.back();
    pack.domain = "kaiwu";
    pack.opset = 1;
    pack.attrs = {{"conv", IntAttr(conv)}, {"trans", IntAttr(trans)}};
    // Trailing omitted inputs are dropped.
    while (!pack.inputs.empty() && pack.inputs.back() < 0) pack.inputs.pop_back();

    const Node& src = g->nodes[i];  // AddOp may have reallocated nodes
    Node fused;
    fused.op_type = "QLinearFused";
    fused.domain = "kaiwu";
    fused.opset = 1;
    fused.name = base + "_int8";
    fused.inputs = {dx.x, packed};
    fused.outputs = {out};
    fused.attrs = {{"conv", IntAttr(conv)}, {"k", IntAttr(k)}, {"n", IntAttr(n)}, {"y_dtype", IntAttr(y_dtype)}};
    for (const char* a : {"_kaiwu_act", "_kaiwu_act_params"})
      if (src.Has(a)) fused.attrs[a] = src.attrs.at(a);
    if (conv) {
      for (const char* a : {"strides", "pads", "dilations", "auto_pad"})
        if (src.Has(a)) fused.attrs[a] = src.attrs.at(a);
      fused.attrs["kernel_shape"] = IntsAttr(std::vector<int64_t>(wshape.begin() + 2, wshape.end()));
    }
    MarkRemoved(&g->nodes[i]);
    if (q_node >= 0) MarkRemoved(&g->nodes[q_node]);
    g->AddNode(std::move(fused));
    ++fired;
  }
  if (fired) RemoveMarkedNodes(g);
  return fired;
}

}  // namespace kaiwu
