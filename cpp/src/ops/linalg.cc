// Shape inference of Gemm MatMul Einsum, and of the kaiwu ops PackedGemm, FusedMlp and FusedAttention.
#include "ops/linalg.h"

#include <algorithm>

#include "ops/op_registry.h"
#include "ops/view_chain.h"

namespace kaiwu {
namespace {

// Gemm: Y = alpha * op(A) * op(B) + beta * C, C broadcast unidirectionally to [M, N].
void InferGemm(OpContext& ctx) {
  const Node& node = ctx.node;
  ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                     DType::kInt32, DType::kInt64});
  const DType dtype = ctx.in(0).dtype;
  ctx.ExpectDType(1, {dtype});
  const Shape& a = ctx.in(0).shape;
  const Shape& b = ctx.in(1).shape;
  if (a.size() != 2 || b.size() != 2)
    ctx.Error("A and B must be 2-D, got ", ShapeToString(a), " and ", ShapeToString(b));
  GemmParams& p = ctx.SetParams<GemmParams>();
  p.trans_a = node.GetInt("transA", 0) != 0;
  p.trans_b = node.GetInt("transB", 0) != 0;
  p.alpha = node.GetFloat("alpha", 1.f);
  p.beta = node.GetFloat("beta", 1.f);
  p.m = p.trans_a ? a[1] : a[0];
  p.k = p.trans_a ? a[0] : a[1];
  const int64_t kb = p.trans_b ? b[1] : b[0];
  p.n = p.trans_b ? b[0] : b[1];
  if (p.k != kb)
    ctx.Error("inner dimensions differ: op(A) is [", p.m, ", ", p.k, "], op(B) is [", kb, ", ", p.n,
              "]");
  p.has_c = ctx.HasInput(2);
  if (p.has_c) {
    ctx.ExpectDType(2, {dtype});
    const Shape& c = ctx.in(2).shape;
    if (c.size() > 2) ctx.Error("C must have rank <= 2, got ", ShapeToString(c));
    const int64_t cm = c.size() == 2 ? c[0] : 1;
    const int64_t cn = c.empty() ? 1 : c.back();
    if ((cm != 1 && cm != p.m) || (cn != 1 && cn != p.n))
      ctx.Error("C of shape ", ShapeToString(c), " does not broadcast to [", p.m, ", ", p.n, "]");
    p.c_row_stride = cm == 1 ? 0 : cn;
    p.c_col_stride = cn == 1 ? 0 : 1;
  }
  ctx.SetOutput(0, dtype, {p.m, p.n});
  p.act = FusedActivation::FromNode(node);
  if (p.act.active() && !IsFloat(dtype))
    ctx.Error("a fused activation needs a float type, got ", DTypeName(dtype));
}

// MatMul with numpy semantics: 1-D operands are promoted (and the added dim
// removed again), leading batch dims broadcast.
void InferMatMul(OpContext& ctx) {
  ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                     DType::kInt32, DType::kInt64});
  const DType dtype = ctx.in(0).dtype;
  ctx.ExpectDType(1, {dtype});
  Shape a = ctx.in(0).shape, b = ctx.in(1).shape;
  if (a.empty() || b.empty()) ctx.Error("MatMul operands must have rank >= 1");
  const bool trans_b = ctx.node.GetInt("_kaiwu_trans_b", 0) != 0;
  if (trans_b) {
    if (b.size() < 2) ctx.Error("_kaiwu_trans_b needs B of rank >= 2, got ", ShapeToString(b));
    std::swap(b[b.size() - 2], b[b.size() - 1]);
  }
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), 1);
  if (b_vec) b.push_back(1);
  const size_t ra = a.size(), rb = b.size();
  MatMulParams& p = ctx.SetParams<MatMulParams>();
  p.trans_b = trans_b;
  p.m = a[ra - 2];
  p.k = a[ra - 1];
  p.n = b[rb - 1];
  if (b[rb - 2] != p.k)
    ctx.Error("inner dimensions differ: ", ShapeToString(ctx.in(0).shape), " x ",
              ShapeToString(ctx.in(1).shape));
  p.a_batch.assign(a.begin(), a.end() - 2);
  p.b_batch.assign(b.begin(), b.end() - 2);
  p.batch = BroadcastShapes(ctx, p.a_batch, p.b_batch);
  Shape out = p.batch;
  if (!a_vec) out.push_back(p.m);
  if (!b_vec) out.push_back(p.n);
  ctx.SetOutput(0, dtype, out);
  p.act = FusedActivation::FromNode(ctx.node);
  if (p.act.active() && !IsFloat(dtype))
    ctx.Error("a fused activation needs a float type, got ", DTypeName(dtype));
}

bool Contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Einsum: the equation's labels, each label's extent (a dim of 1 broadcasts
// against a larger one) and each input's layout by label.
void InferEinsum(OpContext& ctx) {
  if (!ctx.node.Has("equation")) ctx.Error("missing attribute 'equation'");
  const int n = ctx.num_inputs();
  if (n < 1) ctx.Error("needs at least one input");
  std::vector<int> ranks;
  for (int i = 0; i < n; ++i) {
    ctx.ExpectDType(i, {DType::kFloat32, DType::kFloat64});
    if (ctx.in(i).dtype != ctx.in(0).dtype) ctx.Error("inputs must share one dtype");
    ranks.push_back(ctx.in(i).rank());
  }
  EinsumParams& p = ctx.SetParams<EinsumParams>();
  p.spec = ParseEinsum(ctx, ctx.node.GetString("equation", ""), ranks);
  for (int i = 0; i < n; ++i)
    for (int d = 0; d < ranks[i]; ++d) {
      int64_t& s = p.sizes[p.spec.inputs[i][d]];
      int64_t dim = ctx.in(i).shape[d];
      if (s > 1 && dim != 1 && dim != s)
        ctx.Error("einsum dimension mismatch for a label: ", s, " vs ", dim);
      s = std::max(s, dim);
    }
  p.operands.assign(n, EinsumOperand{});
  for (int i = 0; i < n; ++i) {
    EinsumOperand& op = p.operands[i];
    int64_t stride = 1;
    for (int d = ranks[i] - 1; d >= 0; --d) {
      const int label = p.spec.inputs[i][d];
      int64_t dim = ctx.in(i).shape[d];
      bool bc = dim == 1 && p.sizes[label] != 1;
      op.strided |= bc || op.strides.count(label) > 0;
      op.strides[label] += bc ? 0 : stride;  // a diagonal sums its strides
      stride *= dim;
    }
    for (int label : p.spec.inputs[i])
      if (!Contains(op.labels, label)) op.labels.push_back(label);
  }
  Shape out_shape;
  for (int l : p.spec.output) out_shape.push_back(p.sizes[l]);
  ctx.SetOutput(0, ctx.in(0).dtype, out_shape);
}


// PackedGemm: see ops/linalg.h.
void InferPackedGemm(OpContext& ctx) {
  constexpr int64_t kPanel = 16;
  ctx.ExpectDType(0, {DType::kFloat32});
  ctx.ExpectDType(1, {DType::kFloat32});
  const Shape& a = ctx.in(0).shape;
  const Shape& b = ctx.in(1).shape;
  PackedGemmParams& p = ctx.SetParams<PackedGemmParams>();
  p.n = ctx.node.GetInt("n", -1);
  if (a.empty()) ctx.Error("A must have rank >= 1, got a scalar");
  p.k = a.back();
  p.m = 1;
  for (size_t i = 0; i + 1 < a.size(); ++i) p.m *= a[i];
  if (p.n < 1 || b.size() != 3 || b[0] != (p.n + kPanel - 1) / kPanel || b[1] != p.k ||
      b[2] != kPanel)
    ctx.Error("packed B must be [ceil(n / 16), k, 16] = [", (p.n + kPanel - 1) / kPanel, ", ", p.k,
              ", 16] for n = ", p.n, ", got ", ShapeToString(b));
  p.has_bias = ctx.HasInput(2);
  if (p.has_bias) {
    ctx.ExpectDType(2, {DType::kFloat32});
    const Shape& c = ctx.in(2).shape;
    if (c.empty() || c.size() > 2 || c.back() != p.n || (c.size() == 2 && c[0] != 1))
      ctx.Error("bias must be [n] or [1, n] with n = ", p.n, ", got ", ShapeToString(c));
  }
  Shape out(a.begin(), a.end() - 1);
  out.push_back(p.n);
  ctx.SetOutput(0, DType::kFloat32, out);
  p.act = FusedActivation::FromNode(ctx.node);
}

// FusedMlp: see FusedMlpParams. The weights' dtype (input 1) is the op's type.
void InferFusedMlp(OpContext& ctx) {
  const Node& node = ctx.node;
  const std::vector<int64_t> inputs = node.GetInts("layer_inputs");
  const std::vector<int64_t> trans_b = node.GetInts("layer_trans_b");
  const std::vector<float> act_params = node.GetFloats("layer_act_params");
  const std::vector<int64_t> output_layers = node.GetInts("output_layers");
  const std::vector<int64_t> output_dtypes = node.GetInts("output_dtypes");
  std::vector<std::string> acts;
  if (node.Has("layer_acts")) acts = node.attrs.at("layer_acts").strings;
  const size_t layers = inputs.size();
  if (layers == 0 || trans_b.size() != layers || acts.size() != layers ||
      act_params.size() != 2 * layers || ctx.num_inputs() != static_cast<int>(1 + 2 * layers))
    ctx.Error("needs X and (W, B) for each of its ", layers, " layers, with layer_trans_b, ",
              "layer_acts and 2 layer_act_params per layer");
  if (output_layers.empty() || output_dtypes.size() != output_layers.size() ||
      node.outputs.size() != output_layers.size())
    ctx.Error("needs one output_layers and output_dtypes entry per output");
  ctx.ExpectDType(1, {DType::kFloat16, DType::kBFloat16});
  const DType t = ctx.in(1).dtype;
  ctx.ExpectDType(0, {DType::kFloat32, t});
  const Shape& x = ctx.in(0).shape;
  if (x.empty()) ctx.Error("X must have at least one dim, got a scalar");
  const Shape lead(x.begin(), x.end() - 1);
  FusedMlpParams& p = ctx.SetParams<FusedMlpParams>();
  p.m = NumElements(lead);
  p.max_rows = node.GetInt("max_rows", 0);
  if (p.max_rows < 0) ctx.Error("max_rows must be >= 0, got ", p.max_rows);
  for (size_t l = 0; l < layers; ++l) {
    FusedMlpParams::Layer L;
    L.input = static_cast<int>(inputs[l]);
    if (L.input < -1 || L.input >= static_cast<int>(l))
      ctx.Error("layer ", l, " reads layer ", L.input, ": only X (-1) or an earlier layer");
    L.trans_b = trans_b[l] != 0;
    L.k = L.input < 0 ? x.back() : p.layers[L.input].n;
    const int wi = static_cast<int>(1 + 2 * l);
    ctx.ExpectDType(wi, {t});
    const Shape& w = ctx.in(wi).shape;
    if (w.size() != 2 || (L.trans_b ? w[1] : w[0]) != L.k)
      ctx.Error("layer ", l, ": W must be 2-D with K = ", L.k, (L.trans_b ? " columns" : " rows"),
                ", got ", ShapeToString(w));
    L.n = L.trans_b ? w[0] : w[1];
    L.has_bias = ctx.HasInput(wi + 1);
    if (L.has_bias) {
      ctx.ExpectDType(wi + 1, {t});
      if (NumElements(ctx.in(wi + 1).shape) != L.n || ctx.in(wi + 1).shape.back() != L.n)
        ctx.Error("layer ", l, ": B must have N = ", L.n, " elements, got ",
                  ShapeToString(ctx.in(wi + 1).shape));
    }
    Node act;  // the layer's activation as FusedActivation reads it
    act.name = node.name;
    act.attrs["_kaiwu_act"].kind = Attribute::Kind::kString;
    act.attrs["_kaiwu_act"].s = acts[l];
    act.attrs["_kaiwu_act_params"].kind = Attribute::Kind::kFloats;
    act.attrs["_kaiwu_act_params"].floats = {act_params[2 * l], act_params[2 * l + 1]};
    L.act = acts[l].empty() ? FusedActivation{} : FusedActivation::FromNode(act);
    p.layers.push_back(L);
  }
  for (size_t o = 0; o < output_layers.size(); ++o) {
    const int64_t l = output_layers[o];
    if (l < 0 || l >= static_cast<int64_t>(layers)) ctx.Error("output ", o, " names layer ", l);
    const DType d = output_dtypes[o] == 1 ? DType::kFloat32 : t;
    if (output_dtypes[o] != 1 && output_dtypes[o] != (t == DType::kFloat16 ? 10 : 16))
      ctx.Error("output ", o, ": output_dtypes must be float32 (1) or the weights' type");
    p.output_layers.push_back(static_cast<int>(l));
    Shape y = lead;
    y.push_back(p.layers[l].n);
    ctx.SetOutput(static_cast<int>(o), d, y);
  }
}

// Strides of a tensor of `shape` (contiguous) over the last `batch.size()`
// dims of `out_batch` it broadcasts to: `own` of its leading dims, 0 where it
// has 1 (or lacks the dim), with `matrix` elements per batch item.
std::vector<int64_t> BatchStrides(const Shape& own, const Shape& out_batch, int64_t matrix) {
  std::vector<int64_t> strides(out_batch.size(), 0);
  int64_t stride = matrix;
  for (size_t k = 0; k < own.size(); ++k) {
    const size_t src = own.size() - 1 - k, dst = out_batch.size() - 1 - k;
    strides[dst] = own[src] == 1 ? 0 : stride;
    stride *= own[src];
  }
  return strides;
}

// The strides of a view's leading dims `own` (right-aligned to `out_batch`), 0
// where the view has 1 (or lacks the dim).
std::vector<int64_t> ViewBatchStrides(const Shape& own, const std::vector<int64_t>& strides,
                                      const Shape& out_batch) {
  std::vector<int64_t> out(out_batch.size(), 0);
  for (size_t k = 0; k < own.size(); ++k) {
    const size_t src = own.size() - 1 - k, dst = out_batch.size() - 1 - k;
    out[dst] = own[src] == 1 ? 0 : strides[src];
  }
  return out;
}

// FusedAttention's Q, K or V (slot 0, 1, 2) read through its view recipe from
// input 6 + slot, where the plan's shapes give one stride per dim and the
// view's shape is the slot's; false (the slot read as it is) otherwise.
bool SlotView(const OpContext& ctx, int slot, DType t, StridedView* view) {
  static const char* kAttr[] = {"q_view", "k_view", "v_view"};
  const int base = 6 + slot;
  if (!ctx.node.Has(kAttr[slot]) || !ctx.HasInput(base) || ctx.in(base).dtype != t) return false;
  const auto target = [&ctx](int64_t k) {
    const int i = static_cast<int>(k);
    if (!ctx.HasInput(i) || !ctx.in(i).data || ctx.in(i).rank() != 1) return std::vector<int64_t>{-2};
    return ctx.ConstInts(i);
  };
  return ComposeView(ctx.in(base).shape, ctx.node.GetInts(kAttr[slot]), target, view) &&
         view->shape == ctx.in(slot).shape;
}

// FusedAttention: see FusedAttentionParams.
void InferFusedAttention(OpContext& ctx) {
  ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16});
  const DType t = ctx.in(0).dtype;
  ctx.ExpectDType(1, {t});
  ctx.ExpectDType(2, {t});
  const bool has_mask = ctx.HasInput(3);
  if (has_mask) ctx.ExpectDType(3, {t});
  const Shape& q = ctx.in(0).shape;
  Shape k = ctx.in(1).shape;
  const Shape& v = ctx.in(2).shape;
  if (q.size() < 2 || k.size() < 2 || v.size() < 2)
    ctx.Error("Q, K and V must have rank >= 2, got ", ShapeToString(q), ", ", ShapeToString(ctx.in(1).shape),
              ", ", ShapeToString(v));
  const bool k_trans = ctx.node.GetInt("k_trans", 0) != 0;
  if (k_trans) std::swap(k[k.size() - 2], k[k.size() - 1]);
  FusedAttentionParams& p = ctx.SetParams<FusedAttentionParams>();
  const int64_t nq = q[q.size() - 2], d = q.back(), mk = k.back();
  if (k[k.size() - 2] != d)
    ctx.Error("Q x K: inner dimensions differ: ", ShapeToString(q), " x ", ShapeToString(ctx.in(1).shape));
  const Shape qb(q.begin(), q.end() - 2), kb(k.begin(), k.end() - 2);
  Shape scores = BroadcastShapes(ctx, qb, kb);
  scores.push_back(nq);
  scores.push_back(mk);
  Shape probs = scores;
  if (has_mask) probs = BroadcastShapes(ctx, scores, ctx.in(3).shape);
  if (probs.size() < 2) ctx.Error("the scores must have rank >= 2");
  const int64_t n = probs[probs.size() - 2], m = probs.back();
  if (v[v.size() - 2] != m)
    ctx.Error("softmax(Q x K) x V: inner dimensions differ: ", ShapeToString(probs), " x ", ShapeToString(v));
  const Shape pb(probs.begin(), probs.end() - 2), vb(v.begin(), v.end() - 2);
  p.batch = BroadcastShapes(ctx, pb, vb);
  if (p.batch.size() > static_cast<size_t>(FusedAttentionParams::kMaxBatchDims))
    ctx.Error("at most ", FusedAttentionParams::kMaxBatchDims, " batch dims, got ", ShapeToString(p.batch));
  p.n = n;
  p.m = m;
  p.d = d;
  p.dv = v.back();
  p.has_mask = has_mask;
  p.scale = ctx.node.GetFloat("scale", 1.f);
  // Optional inputs 4 and 5: one-element factors of Q and K, known when the plan is made.
  for (int i = 4; i <= 5; ++i) {
    if (!ctx.HasInput(i)) continue;
    const char* of = i == 4 ? "Q" : "K";
    if (ctx.in(i).size() != 1)
      ctx.Error("input ", i, " (a scale of ", of, ") must hold one element, got ", ShapeToString(ctx.in(i).shape));
    if (!ctx.in(i).data) ctx.Error("input ", i, " (a scale of ", of, ") must be known when the plan is made");
    p.scale *= static_cast<float>(ConstNumbers(ctx, i)[0]);
  }
  // Q [qb, nq, d]: its rows repeat when nq is 1 and the mask made n rows.
  p.q_batch = BatchStrides(qb, p.batch, nq * d);
  p.q_row = nq == 1 ? 0 : d;
  p.q_inner = 1;
  // K stored [kb, d, mk] (or [kb, mk, d] with k_trans); its one key repeats when mk is 1.
  p.k_batch = BatchStrides(kb, p.batch, d * mk);
  p.k_inner = k_trans ? 1 : mk;
  p.k_key = mk == 1 ? 0 : (k_trans ? d : 1);
  p.v_batch = BatchStrides(vb, p.batch, m * p.dv);
  p.v_key = p.dv;
  if (has_mask) {
    const Shape& mask = ctx.in(3).shape;
    const size_t r = mask.size();
    const int64_t mr = r >= 2 ? mask[r - 2] : 1, mc = r >= 1 ? mask[r - 1] : 1;
    const Shape mb(mask.begin(), mask.end() - std::min<size_t>(r, 2));
    p.mask_batch = BatchStrides(mb, p.batch, mr * mc);
    p.mask_row = mr == 1 ? 0 : mc;
    p.mask_key = mc == 1 ? 0 : 1;
  } else {
    p.mask_batch.assign(p.batch.size(), 0);
  }
  // Q, K, V through their views where the kernels' unit inner strides hold.
  StridedView view;
  if (SlotView(ctx, 0, t, &view) && (d == 1 || view.strides.back() == 1)) {
    const size_t r = view.shape.size();
    p.q_batch = ViewBatchStrides(qb, view.strides, p.batch);
    p.q_row = nq == 1 ? 0 : view.strides[r - 2];
    p.q_input = 6;
    p.q_offset = view.offset;
  }
  if (SlotView(ctx, 1, t, &view)) {
    const size_t r = view.shape.size();
    const int64_t outer = view.strides[r - 2], inner = view.strides[r - 1];
    const int64_t k_inner = k_trans ? inner : outer, k_key = mk == 1 ? 0 : (k_trans ? outer : inner);
    if (k_inner == 1 || k_key == 1 || d == 1) {
      p.k_batch = ViewBatchStrides(kb, view.strides, p.batch);
      p.k_inner = k_inner;
      p.k_key = k_key;
      p.k_input = 7;
      p.k_offset = view.offset;
    }
  }
  if (SlotView(ctx, 2, t, &view) && (p.dv == 1 || view.strides.back() == 1)) {
    const size_t r = view.shape.size();
    p.v_batch = ViewBatchStrides(vb, view.strides, p.batch);
    p.v_key = m == 1 ? 0 : view.strides[r - 2];
    p.v_input = 8;
    p.v_offset = view.offset;
  }
  if (p.q_input != 0 || p.k_input != 1 || p.v_input != 2) {
    ctx.unused_inputs.assign(ctx.inputs.size(), false);
    ctx.unused_inputs[0] = p.q_input != 0;
    ctx.unused_inputs[1] = p.k_input != 1;
    ctx.unused_inputs[2] = p.v_input != 2;
  }
  Shape y = p.batch;
  y.push_back(n);
  y.push_back(p.dv);
  const size_t rank = y.size();
  std::vector<int64_t> natural_stride(rank, 1);  // Y's strides by its own axes
  Shape out = y;
  if (ctx.node.Has("y_perm")) {
    const std::vector<int64_t> perm = ctx.node.GetInts("y_perm");
    std::vector<bool> seen(rank, false);
    bool ok = perm.size() == rank && perm.back() == static_cast<int64_t>(rank) - 1;
    for (size_t i = 0; ok && i < perm.size(); ++i) {
      ok = perm[i] >= 0 && perm[i] < static_cast<int64_t>(rank) && !seen[perm[i]];
      if (ok) seen[perm[i]] = true;
    }
    if (!ok) ctx.Error("y_perm must permute Y's ", rank, " axes keeping the last one last");
    for (size_t i = 0; i < rank; ++i) out[i] = y[perm[i]];
    int64_t stride = 1;
    for (size_t i = rank; i-- > 0;) {
      natural_stride[perm[i]] = stride;
      stride *= out[i];
    }
  } else {
    for (size_t i = rank - 1; i-- > 0;) natural_stride[i] = natural_stride[i + 1] * y[i + 1];
  }
  p.y_batch.assign(natural_stride.begin(), natural_stride.end() - 2);
  p.y_row = natural_stride[rank - 2];
  ctx.SetOutput(0, t, out);
}

}  // namespace

void RegisterLinalgOps(OpRegistry& r) {
  r.Define(OpId::kPackedGemm, &InferPackedGemm);
  r.Define(OpId::kGemm, &InferGemm);
  r.Define(OpId::kMatMul, &InferMatMul);
  r.Define(OpId::kEinsum, &InferEinsum);
  r.Define(OpId::kFusedMlp, &InferFusedMlp, /*type_input=*/1);
  r.Define(OpId::kFusedAttention, &InferFusedAttention);
}

}  // namespace kaiwu
