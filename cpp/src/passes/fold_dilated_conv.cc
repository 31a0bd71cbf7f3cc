// TensorFlow's dilated convolution as exported by tf2onnx: SpaceToBatchND and
// BatchToSpaceND around a plain Conv become
//   Pad -> Reshape -> Transpose -> Reshape -> Conv -> Reshape -> Transpose -> Reshape -> Slice
// (NCHW), or the same with a Transpose pair around the Conv and channels last.
// The chain becomes one Conv with dilations and explicit pads (plus the layout
// Transposes for channels last). With block rates (rh, rw), paddings
// (pt, pb, pl, pr) and crop start (ct, cl), output row i reads padded rows
// i + ct + k*rh, i.e. input rows i - (pt - ct) + k*rh: a Conv with dilation rh
// and top pad pt - ct; the bottom pad follows from the cropped output size.
// The Conv keeps its original weight and bias values, so refit is unaffected.
#include <array>

#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

namespace {

using Ints = std::vector<int64_t>;

struct Layout {
  bool nhwc;
  Ints perm_in, perm_out;  // the Transposes of SpaceToBatch and BatchToSpace
  int sp0, sp1;            // spatial axes of the 4-D tensors
};
const Layout kNchw{false, {3, 5, 0, 1, 2, 4}, {2, 3, 4, 0, 5, 1}, 2, 3};
const Layout kNhwc{true, {2, 4, 0, 1, 3, 5}, {2, 3, 0, 4, 1, 5}, 1, 2};

class Matcher {
 public:
  explicit Matcher(const Graph& g)
      : g_(g), producer_(Producers(g)), uses_(UseCounts(g)), consumers_(g.Consumers()) {}

  // The node reading `v` if it is its only reader, of type `op`.
  const Node* Next(int v, const char* op) const {
    if (v < 0 || uses_[v] != 1 || IsGraphOutput(g_, v) || consumers_[v].size() != 1) return nullptr;
    const Node& n = g_.nodes[consumers_[v][0]];
    return n.op_type == op && n.domain.empty() && n.outputs.size() == 1 ? &n : nullptr;
  }
  const Node* Prev(int v, const char* op) const { return SoleProducer(g_, producer_, uses_, v, op); }
  // A matched node's first input or output, -1 when a malformed node has none.
  static int In0(const Node* n) { return n && !n->inputs.empty() ? n->inputs[0] : -1; }
  static int Out0(const Node* n) { return n && !n->outputs.empty() ? n->outputs[0] : -1; }

  bool Perm(const Node* t, const Ints& perm) const {
    return t && t->GetInts("perm") == perm;
  }
  bool ReshapeTo(const Node* r, Ints* shape) const {
    return r && r->GetInt("allowzero", 0) == 0 && r->HasInput(1) && ConstInts(g_, r->inputs[1], shape);
  }

  const Graph& g_;
  std::vector<int> producer_, uses_;
  std::vector<std::vector<int>> consumers_;
};

struct Match {
  const Layout* layout = nullptr;
  int x = -1, y = -1;                    // chain input and final output
  int conv = -1;                         // node index of the Conv
  std::vector<const Node*> chain;        // every node replaced
  int64_t rh = 1, rw = 1, pads[4] = {};  // dilations and Conv pads (t, l, b, r)
};

// Pad amounts (begin/end per spatial axis) of a zero, constant-mode Pad.
bool SpatialPads(const Graph& g, const Node& pad, const Layout& l, Ints* out) {
  if (pad.GetString("mode", "constant") != "constant" || pad.HasInput(3)) return false;
  if (pad.HasInput(2) && !IsConstScalar(g, pad.inputs[2], 0.0)) return false;
  if (pad.Has("value") && pad.GetFloat("value", 0.f) != 0.f) return false;
  Ints p;
  if (pad.HasInput(1)) {
    if (!ConstInts(g, pad.inputs[1], &p)) return false;
  } else {
    p = pad.GetInts("pads");
  }
  if (p.size() != 8) return false;
  for (int a = 0; a < 4; ++a) {
    bool spatial = a == l.sp0 || a == l.sp1;
    if (p[a] < 0 || p[a + 4] < 0 || (!spatial && (p[a] || p[a + 4]))) return false;
  }
  *out = {p[l.sp0], p[l.sp0 + 4], p[l.sp1], p[l.sp1 + 4]};
  return true;
}

// A plain Conv: unit strides and dilations, no padding, 4-D weight of known shape.
bool PlainConv(const Graph& g, const Node& c, Ints* wdims) {
  if (!c.HasInput(1) || c.outputs.size() != 1) return false;
  const Value& w = g.values[c.inputs[1]];
  if (!w.has_shape || w.dims.size() != 4) return false;
  wdims->clear();
  for (const Dim& d : w.dims) {
    if (d.value <= 0) return false;
    wdims->push_back(d.value);
  }
  auto all = [](const Ints& v, int64_t x) {
    for (int64_t e : v)
      if (e != x) return false;
    return true;
  };
  std::string ap = c.GetString("auto_pad", "NOTSET");
  if (ap != "NOTSET" && ap != "VALID") return false;
  if (!all(c.GetInts("strides"), 1) || !all(c.GetInts("dilations"), 1) || !all(c.GetInts("pads"), 0))
    return false;
  Ints ks = c.GetInts("kernel_shape");
  return ks.empty() || ks == Ints{(*wdims)[2], (*wdims)[3]};
}

bool MatchAt(const Matcher& m, int conv_index, Match* out) {
  const Graph& g = m.g_;
  const Node& conv = g.nodes[conv_index];
  Ints wd;
  if (conv.op_type != "Conv" || !conv.domain.empty() || !PlainConv(g, conv, &wd)) return false;
  const Node* t_in = m.Prev(conv.inputs[0], "Transpose");
  const Node* t_out = m.Next(conv.outputs[0], "Transpose");
  if ((t_in && Matcher::In0(t_in) < 0) || (t_out && Matcher::Out0(t_out) < 0)) return false;
  const bool nhwc = m.Perm(t_in, {0, 3, 1, 2}) && m.Perm(t_out, {0, 2, 3, 1});
  const Layout& l = nhwc ? kNhwc : kNchw;
  std::vector<const Node*> chain = {&conv};
  if (nhwc) chain.insert(chain.end(), {t_in, t_out});
  // SpaceToBatch, walking back from the Conv's input.
  const Node* r2 = m.Prev(nhwc ? t_in->inputs[0] : conv.inputs[0], "Reshape");
  if (!r2) return false;
  const Node* tr1 = m.Prev(Matcher::In0(r2), "Transpose");
  if (!m.Perm(tr1, l.perm_in)) return false;
  const Node* r1 = m.Prev(Matcher::In0(tr1), "Reshape");
  Ints s1, s2, s3, s4;
  if (!m.ReshapeTo(r1, &s1) || !m.ReshapeTo(r2, &s2) || s1.size() != 6 || s2.size() != 4) return false;
  const Node* pad = m.Prev(Matcher::In0(r1), "Pad");
  if (pad && Matcher::In0(pad) < 0) return false;
  Ints pads = {0, 0, 0, 0};  // t, b, l, r
  if (pad && !SpatialPads(g, *pad, l, &pads)) return false;
  // Positions in s1 of (Hb, rh, Wb, rw, C) and in 4-D tensors of C.
  const int c4 = nhwc ? 3 : 1;
  const int64_t hb = s1[nhwc ? 1 : 2], rh = s1[nhwc ? 2 : 3], wb = s1[nhwc ? 3 : 4],
                rw = s1[nhwc ? 4 : 5], ch = s1[nhwc ? 5 : 1], n = s1[0];
  if (hb <= 0 || wb <= 0 || rh <= 0 || rw <= 0 || ch <= 0 || (n <= 0 && n != -1)) return false;
  auto batch_ok = [n](int64_t v, int64_t mult) { return v == -1 ? true : n > 0 && v == n * mult; };
  Ints s2_want(4);
  s2_want[0] = s2[0];
  s2_want[l.sp0] = hb;
  s2_want[l.sp1] = wb;
  s2_want[c4] = ch;
  if (s2 != s2_want || !batch_ok(s2[0], rh * rw)) return false;
  const int64_t kh = wd[2], kw = wd[3], oc = wd[0];
  if (wd[1] * conv.GetInt("group", 1) != ch) return false;
  const int64_t ho = hb - kh + 1, wo = wb - kw + 1;
  if (ho <= 0 || wo <= 0) return false;
  // BatchToSpace, walking forward from the Conv's output.
  const Node* r3 = m.Next(nhwc ? t_out->outputs[0] : conv.outputs[0], "Reshape");
  if (!m.ReshapeTo(r3, &s3) || s3.size() != 6) return false;
  Ints s3_want = nhwc ? Ints{rh, rw, s3[2], ho, wo, oc} : Ints{rh, rw, s3[2], oc, ho, wo};
  if (s3 != s3_want || !batch_ok(s3[2], 1)) return false;
  const Node* tr2 = m.Next(r3->outputs[0], "Transpose");
  if (!m.Perm(tr2, l.perm_out)) return false;
  const Node* r4 = m.Next(Matcher::Out0(tr2), "Reshape");
  if (!m.ReshapeTo(r4, &s4) || s4.size() != 4) return false;
  Ints s4_want(4);
  s4_want[0] = s4[0];
  s4_want[l.sp0] = ho * rh;
  s4_want[l.sp1] = wo * rw;
  s4_want[c4] = oc;
  if (s4 != s4_want || !batch_ok(s4[0], 1)) return false;
  chain.insert(chain.end(), {r1, tr1, r2, r3, tr2, r4});
  if (pad) chain.push_back(pad);
  // The optional crop.
  int64_t begin[2] = {0, 0}, size[2] = {ho * rh, wo * rw};
  int y = r4->outputs[0];
  if (const Node* sl = m.Next(y, "Slice")) {
    Ints starts, ends, axes = {0, 1, 2, 3}, steps;
    bool ok = sl->HasInput(1) ? sl->HasInput(2) && ConstInts(g, sl->inputs[1], &starts) &&
                                    ConstInts(g, sl->inputs[2], &ends)
                              : (starts = sl->GetInts("starts"), ends = sl->GetInts("ends"), true);
    if (sl->HasInput(3)) ok = ok && ConstInts(g, sl->inputs[3], &axes);
    else if (sl->Has("axes")) axes = sl->GetInts("axes");
    if (sl->HasInput(4)) ok = ok && ConstInts(g, sl->inputs[4], &steps);
    axes.resize(starts.size());
    if (!ok || starts.size() != ends.size()) return false;
    for (int64_t s : steps)
      if (s != 1) return false;
    int64_t full[4];
    full[0] = full[c4] = -1;
    full[l.sp0] = ho * rh;
    full[l.sp1] = wo * rw;
    for (size_t k = 0; k < axes.size(); ++k) {
      int64_t a = axes[k] < 0 ? axes[k] + 4 : axes[k];
      if (a != l.sp0 && a != l.sp1) {  // other axes must be left whole
        if (starts[k] != 0 || ends[k] < (int64_t{1} << 31)) return false;
        continue;
      }
      int64_t len = full[a], s = starts[k], e = ends[k];
      s = std::min(std::max(s < 0 ? s + len : s, int64_t{0}), len);
      e = std::min(std::max(e < 0 ? e + len : e, int64_t{0}), len);
      if (e <= s) return false;
      int k2 = a == l.sp0 ? 0 : 1;
      begin[k2] = s;
      size[k2] = e - s;
    }
    chain.push_back(sl);
    y = sl->outputs[0];
  }
  // Conv pads: begin = pad - crop start; end from the output size.
  const int64_t h = hb * rh - pads[0] - pads[1], w = wb * rw - pads[2] - pads[3];
  const int64_t pt = pads[0] - begin[0], pl = pads[2] - begin[1];
  const int64_t pb = size[0] + rh * (kh - 1) - h - pt, pr = size[1] + rw * (kw - 1) - w - pl;
  if (h <= 0 || w <= 0 || pt < 0 || pl < 0 || pb < 0 || pr < 0) return false;
  out->layout = &l;
  out->x = pad ? pad->inputs[0] : r1->inputs[0];
  out->y = y;
  out->conv = conv_index;
  out->chain = chain;
  out->rh = rh;
  out->rw = rw;
  out->pads[0] = pt;
  out->pads[1] = pl;
  out->pads[2] = pb;
  out->pads[3] = pr;
  return true;
}

}  // namespace

int FoldDilatedConv(Graph* g) {
  std::vector<Match> matches;
  {
    Matcher m(*g);
    for (size_t i = 0; i < g->nodes.size(); ++i) {
      Match mt;
      if (MatchAt(m, static_cast<int>(i), &mt)) matches.push_back(mt);
    }
  }
  if (matches.empty()) return 0;
  // Node pointers stay valid until nodes are added: collect indices first.
  std::vector<std::vector<int>> remove;
  for (const Match& mt : matches) {
    remove.emplace_back();
    for (const Node* n : mt.chain) remove.back().push_back(static_cast<int>(n - g->nodes.data()));
  }
  for (size_t k = 0; k < matches.size(); ++k) {
    const Match& mt = matches[k];
    Node conv = g->nodes[mt.conv];
    for (int i : remove[k]) MarkRemoved(&g->nodes[i]);
    conv.attrs.erase("auto_pad");
    conv.attrs.erase("kernel_shape");
    conv.attrs["dilations"] = IntsAttr({mt.rh, mt.rw});
    conv.attrs["strides"] = IntsAttr({1, 1});
    conv.attrs["pads"] = IntsAttr({mt.pads[0], mt.pads[1], mt.pads[2], mt.pads[3]});
    const std::string base = conv.name + "_dilated";
    if (mt.layout->nhwc) {
      int xt = AddOp(g, "Transpose", {mt.x}, base + "_nchw");
      g->nodes.back().attrs["perm"] = IntsAttr({0, 3, 1, 2});
      conv.inputs[0] = xt;
      conv.outputs = {AddIntermediate(g, base + "_out")};
      Node back;
      back.op_type = "Transpose";
      back.name = base + "_nhwc";
      back.opset = g->opset;
      back.inputs = {conv.outputs[0]};
      back.outputs = {mt.y};
      back.attrs["perm"] = IntsAttr({0, 2, 3, 1});
      g->AddNode(std::move(back));
    } else {
      conv.inputs[0] = mt.x;
      conv.outputs = {mt.y};
    }
    conv.name = base;
    g->AddNode(std::move(conv));
  }
  RemoveMarkedNodes(g);
  return static_cast<int>(matches.size());
}

}  // namespace kaiwu
