// The op layer alone (no kernel) for Gemm, MatMul, Einsum, Conv, the pools and
// the normalisations: output shapes and the params their kernels read; and the
// dtypes of the CPU kernel table.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "core/half.h"
#include "kernel_harness.h"
#include "ops/conv.h"
#include "ops/linalg.h"
#include "ops/norm.h"

namespace kaiwu {
namespace testing {
namespace {

/// Runs the op's shape inference on inputs of the given dtypes and shapes.
void Infer(OpContext& ctx, const std::vector<std::pair<DType, Shape>>& inputs) {
  for (const auto& [dtype, shape] : inputs) {
    TensorInfo info;
    info.present = true;
    info.dtype = dtype;
    info.shape = shape;
    ctx.inputs.push_back(info);
  }
  InferOp(ctx);
}

constexpr DType kF32 = DType::kFloat32;

TEST(OpsLinalg, GemmParams) {
  Node node = MakeNode("Gemm", 3, 1,
                       {{"transA", IntAttr(1)},
                        {"alpha", FloatAttr(0.5f)},
                        {"beta", FloatAttr(2.f)},
                        {"_kaiwu_act", StrAttr("LeakyRelu")},
                        {"_kaiwu_act_params", FloatsAttr({0.1f, 0.f})}});
  OpContext ctx(node);
  Infer(ctx, {{kF32, {4, 3}}, {kF32, {4, 5}}, {kF32, {5}}});
  EXPECT_EQ(ShapeToString(ctx.outputs[0].shape), ShapeToString({3, 5}));
  const GemmParams& p = ctx.Params<GemmParams>();
  EXPECT_TRUE(p.trans_a);
  EXPECT_FALSE(p.trans_b);
  EXPECT_EQ(p.m, 3);
  EXPECT_EQ(p.k, 4);
  EXPECT_EQ(p.n, 5);
  EXPECT_FLOAT_EQ(p.alpha, 0.5f);
  EXPECT_FLOAT_EQ(p.beta, 2.f);
  EXPECT_TRUE(p.has_c);
  EXPECT_EQ(p.c_row_stride, 0);  // C [5] broadcasts over the rows
  EXPECT_EQ(p.c_col_stride, 1);
  EXPECT_EQ(p.act.kind, FusedActivation::Kind::kLeakyRelu);
  EXPECT_FLOAT_EQ(p.act.alpha, 0.1f);
}

TEST(OpsLinalg, MatMulPromotesAndBroadcasts) {
  Node node = MakeNode("MatMul", 2, 1);
  OpContext ctx(node);
  Infer(ctx, {{kF32, {2, 1, 3, 4}}, {kF32, {5, 4, 6}}});
  EXPECT_EQ(ShapeToString(ctx.outputs[0].shape), ShapeToString({2, 5, 3, 6}));
  const MatMulParams& p = ctx.Params<MatMulParams>();
  EXPECT_EQ(p.m, 3);
  EXPECT_EQ(p.k, 4);
  EXPECT_EQ(p.n, 6);
  EXPECT_EQ(ShapeToString(p.batch), ShapeToString({2, 5}));
  EXPECT_FALSE(p.act.active());

  OpContext vec(node);
  Infer(vec, {{kF32, {4}}, {kF32, {3, 4, 6}}});
  EXPECT_EQ(ShapeToString(vec.outputs[0].shape), ShapeToString({3, 6}));
  EXPECT_EQ(vec.Params<MatMulParams>().m, 1);
}

TEST(OpsLinalg, EinsumLabelsSizesAndLayouts) {
  Node node = MakeNode("Einsum", 2, 1, {{"equation", StrAttr("bii,bjk->bik")}});
  OpContext ctx(node);
  Infer(ctx, {{kF32, {1, 3, 3}}, {kF32, {4, 2, 5}}});
  EXPECT_EQ(ShapeToString(ctx.outputs[0].shape), ShapeToString({4, 3, 5}));
  const EinsumParams& p = ctx.Params<EinsumParams>();
  EXPECT_EQ(p.sizes.at('b'), 4);  // a dim of 1 broadcasts
  EXPECT_EQ(p.sizes.at('i'), 3);
  ASSERT_EQ(p.operands.size(), 2u);
  const EinsumOperand& a = p.operands[0];
  EXPECT_EQ(a.labels, (std::vector<int>{'b', 'i'}));
  EXPECT_TRUE(a.strided);
  EXPECT_EQ(a.strides.at('b'), 0);  // broadcast
  EXPECT_EQ(a.strides.at('i'), 4);  // the diagonal: 3 + 1
  EXPECT_FALSE(p.operands[1].strided);
  EXPECT_EQ(p.operands[1].strides.at('j'), 5);
}

TEST(OpsConv, ConvGeometryAndActivation) {
  Node node = MakeNode("Conv", 3, 1,
                       {{"auto_pad", StrAttr("SAME_UPPER")},
                        {"strides", IntsAttr({2, 2})},
                        {"group", IntAttr(2)},
                        {"_kaiwu_act", StrAttr("Relu")}});
  OpContext ctx(node);
  Infer(ctx, {{kF32, {1, 4, 7, 8}}, {kF32, {6, 2, 3, 3}}, {kF32, {6}}});
  EXPECT_EQ(ShapeToString(ctx.outputs[0].shape), ShapeToString({1, 6, 4, 4}));
  const ConvParams& p = ctx.Params<ConvParams>();
  EXPECT_EQ(p.group, 2);
  EXPECT_TRUE(p.has_bias);
  EXPECT_EQ(p.act.kind, FusedActivation::Kind::kRelu);
  EXPECT_EQ(p.geo.nd, 2);
  EXPECT_EQ(p.geo.pad_begin[1], 1);  // total pad 2 rows: (4 - 1) * 2 + 3 - 7
  EXPECT_EQ(p.geo.pad_end[1], 1);
  EXPECT_EQ(p.geo.pad_begin[2], 0);  // total pad 1 column, the larger half at the end
  EXPECT_EQ(p.geo.pad_end[2], 1);
}

TEST(OpsConv, MaxPoolIndicesAndCeilMode) {
  Node node = MakeNode("MaxPool", 1, 2,
                       {{"kernel_shape", IntsAttr({2, 2})},
                        {"strides", IntsAttr({2, 2})},
                        {"ceil_mode", IntAttr(1)},
                        {"storage_order", IntAttr(1)}});
  OpContext ctx(node);
  Infer(ctx, {{DType::kUInt8, {2, 3, 5, 5}}});
  EXPECT_EQ(ShapeToString(ctx.outputs[0].shape), ShapeToString({2, 3, 3, 3}));
  EXPECT_EQ(ctx.outputs[0].dtype, DType::kUInt8);
  EXPECT_EQ(ctx.outputs[1].dtype, DType::kInt64);
  const PoolParams& p = ctx.Params<PoolParams>();
  EXPECT_TRUE(p.indices);
  EXPECT_TRUE(p.col_major);
  EXPECT_EQ(p.geo.out_size(), 9);

  Node global = MakeNode("GlobalAveragePool", 1, 1);
  OpContext g(global);
  Infer(g, {{DType::kFloat64, {2, 3, 5, 4, 2}}});
  EXPECT_EQ(ShapeToString(g.outputs[0].shape), ShapeToString({2, 3, 1, 1, 1}));
}

TEST(OpsNorm, LayerNormParams) {
  Node node =
      MakeNode("LayerNormalization", 3, 3, {{"axis", IntAttr(-2)}, {"epsilon", FloatAttr(1e-3f)}});
  OpContext ctx(node);
  Infer(ctx, {{kF32, {2, 3, 4, 5}}, {kF32, {1, 1, 4, 5}}, {kF32, {5}}});
  EXPECT_EQ(ShapeToString(ctx.outputs[0].shape), ShapeToString({2, 3, 4, 5}));
  EXPECT_EQ(ShapeToString(ctx.outputs[1].shape), ShapeToString({2, 3, 1, 1}));
  EXPECT_EQ(ShapeToString(ctx.outputs[2].shape), ShapeToString({2, 3, 1, 1}));
  const LayerNormParams& p = ctx.Params<LayerNormParams>();
  EXPECT_EQ(p.axis, 2);
  EXPECT_FLOAT_EQ(p.epsilon, 1e-3f);
  EXPECT_EQ(ShapeToString(p.norm_shape), ShapeToString({4, 5}));
  EXPECT_EQ(ShapeToString(p.scale_shape), ShapeToString({4, 5}));  // leading 1s dropped
  EXPECT_TRUE(p.has_bias);
  EXPECT_EQ(ShapeToString(p.bias_shape), ShapeToString({5}));
}

// ---- FusedAttention: the params' strides against the four ops' own semantics

// Offset of `full` (an index over `out`, right-aligned) in a contiguous tensor of
// `shape` broadcast to `out`.
int64_t BroadcastOffset(const Shape& shape, const Shape& out, const std::vector<int64_t>& full) {
  int64_t off = 0, stride = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    const size_t s = shape.size() - 1 - k, o = out.size() - 1 - k;
    if (shape[s] != 1) off += full[o] * stride;
    stride *= shape[s];
  }
  return off;
}

std::vector<int64_t> Unflatten(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    idx[k] = flat % shape[k];
    flat /= shape[k];
  }
  return idx;
}

struct AttentionCase {
  Shape q, k, v, mask;  // mask empty: none
  bool k_trans;
  Shape y;
};

// The params' strides, and the CPU kernel that reads through them, against the
// four ops computed one by one.
TEST(OpsLinalg, FusedAttentionStridesMatchMatMulSoftmaxMatMul) {
  std::mt19937 rng(77);
  std::normal_distribution<double> normal(0.0, 1.0);
  const std::vector<AttentionCase> cases = {
      // heads, a key padding mask [B, 1, 1, M] over every head and query row
      {{2, 4, 5, 8}, {2, 4, 8, 5}, {2, 4, 5, 6}, {2, 1, 1, 5}, false, {2, 4, 5, 6}},
      // the key transpose folded into the MatMul (K as [.., M, D])
      {{2, 4, 5, 8}, {2, 4, 5, 8}, {2, 4, 5, 6}, {2, 1, 1, 5}, true, {2, 4, 5, 6}},
      // batch broadcast: Q of rank 2 against K [3, D, M]; V of rank 2
      {{4, 8}, {3, 8, 6}, {6, 5}, {}, false, {3, 4, 5}},
      // one query row repeated by a mask of 3 rows; 40 keys (two chunks of 32)
      {{2, 1, 8}, {2, 8, 40}, {2, 40, 4}, {2, 3, 40}, false, {2, 3, 4}},
      // a per-element mask and V broadcast over the batch
      {{3, 2, 7}, {3, 7, 9}, {1, 9, 33}, {3, 2, 9}, false, {3, 2, 33}},
      // one key broadcast to 4 by the mask, a scalar-per-row mask
      {{2, 3, 5}, {2, 5, 1}, {2, 4, 6}, {2, 3, 4}, false, {2, 3, 6}},
      {{2, 3, 5}, {2, 5, 4}, {2, 4, 6}, {3, 1}, false, {2, 3, 6}},
  };
  for (const AttentionCase& c : cases) {
    const bool has_mask = !c.mask.empty();
    Node node = MakeNode("FusedAttention", has_mask ? 4 : 3, 1, {{"k_trans", IntAttr(c.k_trans ? 1 : 0)}});
    node.domain = "kaiwu";
    OpContext ctx(node);
    std::vector<std::pair<DType, Shape>> ins = {{kF32, c.q}, {kF32, c.k}, {kF32, c.v}};
    if (has_mask) ins.push_back({kF32, c.mask});
    Infer(ctx, ins);
    const std::string what = ShapeToString(c.q) + " " + ShapeToString(c.k) + " " + ShapeToString(c.v);
    ASSERT_EQ(ShapeToString(ctx.outputs[0].shape), ShapeToString(c.y)) << what;
    const FusedAttentionParams& p = ctx.Params<FusedAttentionParams>();

    auto random = [&](const Shape& s) {
      std::vector<double> x(static_cast<size_t>(NumElements(s)));
      for (double& e : x) e = normal(rng);
      return x;
    };
    const std::vector<double> q = random(c.q), k = random(c.k), v = random(c.v);
    const std::vector<double> mask = has_mask ? random(c.mask) : std::vector<double>{};
    // The CPU kernel (float64) on the same inputs.
    std::vector<Tensor> tensors = {MakeTensor<double>(c.q, q), MakeTensor<double>(c.k, k), MakeTensor<double>(c.v, v)};
    if (has_mask) tensors.push_back(MakeTensor<double>(c.mask, mask));
    const std::vector<Tensor> cpu = RunNode(node, tensors);
    ASSERT_EQ(cpu.size(), 1u);
    ASSERT_EQ(ShapeToString(cpu[0].shape()), ShapeToString(c.y)) << what;

    // Reference: the ops one by one, numpy broadcasting by index.
    Shape kl = c.k;  // K's logical [.., D, M]
    if (c.k_trans) std::swap(kl[kl.size() - 2], kl[kl.size() - 1]);
    const int64_t d = c.q.back(), mk = kl.back(), nq = c.q[c.q.size() - 2];
    Shape sb;  // scores' batch: broadcast of Q's and K's
    {
      const Shape qb(c.q.begin(), c.q.end() - 2), kb(kl.begin(), kl.end() - 2);
      sb = qb.size() > kb.size() ? qb : kb;
      for (size_t j = 0; j < std::min(qb.size(), kb.size()); ++j) {
        int64_t& o = sb[sb.size() - 1 - j];
        o = std::max(qb[qb.size() - 1 - j], kb[kb.size() - 1 - j]);
      }
    }
    Shape scores = sb;
    scores.push_back(nq);
    scores.push_back(mk);
    Shape probs = scores;  // broadcast with the mask
    if (has_mask) {
      if (c.mask.size() > probs.size()) probs.insert(probs.begin(), c.mask.size() - probs.size(), 1);
      for (size_t j = 0; j < c.mask.size(); ++j) {
        int64_t& o = probs[probs.size() - 1 - j];
        o = std::max(o, c.mask[c.mask.size() - 1 - j]);
      }
    }
    const int64_t n = probs[probs.size() - 2], m = probs.back(), dv = c.v.back();
    Shape yb(c.y.begin(), c.y.end() - 2);
    for (int64_t row = 0; row < NumElements(yb) * n; ++row) {
      const std::vector<int64_t> yi = Unflatten(row / n, yb);
      const int64_t i = row % n;
      std::vector<int64_t> pi(yi.end() - (probs.size() - 2), yi.end());  // P's batch index
      pi.push_back(i);
      std::vector<double> pr(m);
      double mx = -1e300;
      for (int64_t j = 0; j < m; ++j) {
        std::vector<int64_t> full = pi;
        full.push_back(j);
        // scores at P's index (broadcast into the scores' shape)
        std::vector<int64_t> si(full.end() - scores.size(), full.end());
        for (size_t a = 0; a < si.size(); ++a)
          if (scores[a] == 1) si[a] = 0;
        double sc = 0;
        for (int64_t t = 0; t < d; ++t) {
          std::vector<int64_t> qfull(si.begin(), si.end() - 2);  // Q [.., row, t]
          qfull.push_back(si[si.size() - 2]);
          qfull.push_back(t);
          Shape qshape_out = scores;
          qshape_out.back() = d;
          const double qv = q[BroadcastOffset(c.q, qshape_out, qfull)];
          std::vector<int64_t> kfull(si.begin(), si.end() - 2);
          Shape kshape_out(scores.begin(), scores.end() - 2);
          if (c.k_trans) {
            kfull.push_back(si.back());
            kfull.push_back(t);
            kshape_out.push_back(mk);
            kshape_out.push_back(d);
          } else {
            kfull.push_back(t);
            kfull.push_back(si.back());
            kshape_out.push_back(d);
            kshape_out.push_back(mk);
          }
          sc += qv * k[BroadcastOffset(c.k, kshape_out, kfull)];
        }
        if (has_mask) sc += mask[BroadcastOffset(c.mask, probs, full)];
        pr[j] = sc;
        mx = std::max(mx, sc);
      }
      double sum = 0;
      for (double& e : pr) sum += (e = std::exp(e - mx));
      for (int64_t col = 0; col < dv; ++col) {
        double want = 0;
        for (int64_t j = 0; j < m; ++j) {
          std::vector<int64_t> vfull = yi;
          vfull.push_back(j);
          vfull.push_back(col);
          Shape vout = yb;
          vout.push_back(m);
          vout.push_back(dv);
          want += pr[j] / sum * v[BroadcastOffset(c.v, vout, vfull)];
        }
        // The kernel's reads, through the params alone.
        int64_t qo = 0, ko = 0, vo = 0, mo = 0;
        for (size_t b = 0; b < yi.size(); ++b) {
          qo += yi[b] * p.q_batch[b];
          ko += yi[b] * p.k_batch[b];
          vo += yi[b] * p.v_batch[b];
          mo += yi[b] * p.mask_batch[b];
        }
        std::vector<double> s2(m);
        double mx2 = -1e300;
        for (int64_t j = 0; j < m; ++j) {
          double sc = 0;
          for (int64_t t = 0; t < p.d; ++t)
            sc += q[qo + i * p.q_row + t * p.q_inner] * k[ko + j * p.k_key + t * p.k_inner];
          if (has_mask) sc += mask[mo + i * p.mask_row + j * p.mask_key];
          s2[j] = sc;
          mx2 = std::max(mx2, sc);
        }
        double sum2 = 0, got = 0;
        for (double e : s2) sum2 += std::exp(e - mx2);
        for (int64_t j = 0; j < m; ++j) got += std::exp(s2[j] - mx2) / sum2 * v[vo + j * p.v_key + col];
        ASSERT_NEAR(got, want, 1e-9) << what << " row " << row << " col " << col;
        ASSERT_NEAR(cpu[0].As<double>()[row * dv + col], want, 1e-9) << what << " CPU kernel, row " << row;
      }
    }
  }
}

// y_perm (a Transpose folded into the node) and the scale inputs 4 and 5 (Q's and
// K's factors, known at plan time): the CPU kernel writes the plain node's output
// transposed, scaled as by the attribute scale = q_scale * k_scale.
TEST(OpsLinalg, FusedAttentionTransposedOutputAndScaleInputs) {
  std::mt19937 rng(5);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto random = [&](const Shape& s) {
    std::vector<double> x(static_cast<size_t>(NumElements(s)));
    for (double& e : x) e = normal(rng);
    return MakeTensor<double>(s, x);
  };
  const Tensor q = random({2, 4, 5, 8}), k = random({2, 4, 8, 5}), v = random({2, 4, 5, 6}),
               mask = random({2, 1, 1, 5});
  Node plain = MakeNode("FusedAttention", 4, 1, {{"scale", FloatAttr(1.5f)}});
  plain.domain = "kaiwu";
  const std::vector<Tensor> want = RunNode(plain, {q, k, v, mask});
  Node folded = MakeNode("FusedAttention", 6, 1, {{"y_perm", IntsAttr({2, 0, 1, 3})}});
  folded.domain = "kaiwu";
  Tensor k_scale(DType::kFloat16, Shape{});  // a half session's factor: a half Cast of the number
  k_scale.As<uint16_t>()[0] = FloatToHalf(3.f);
  const std::vector<Tensor> got = RunNode(folded, {q, k, v, mask, MakeTensor<double>({1}, {0.5}), k_scale});
  ASSERT_EQ(ShapeToString(got[0].shape()), "(5, 2, 4, 6)");
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t i = 0; i < 5; ++i)
        for (int64_t c = 0; c < 6; ++c)
          ASSERT_NEAR(got[0].As<double>()[((i * 2 + b) * 4 + h) * 6 + c],
                      want[0].As<double>()[((b * 4 + h) * 5 + i) * 6 + c], 1e-12);
  Node moves_last = MakeNode("FusedAttention", 3, 1, {{"y_perm", IntsAttr({0, 1, 3, 2})}});
  moves_last.domain = "kaiwu";
  // A scale input of two elements: a model error naming the input.
  Node two_scales = MakeNode("FusedAttention", 5, 1, {});
  two_scales.domain = "kaiwu";
  try {
    RunNode(two_scales, {q, k, v, mask, MakeTensor<double>({2}, {0.5, 0.25})});
    ADD_FAILURE() << "no error for a two-element scale";
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(StatusCode::kModel)) << e.what();
    EXPECT_NE(std::string(e.what()).find("input 4"), std::string::npos) << e.what();
  }
  OpContext ctx(moves_last);
  try {
    Infer(ctx, {{kF32, q.shape()}, {kF32, k.shape()}, {kF32, v.shape()}});
    ADD_FAILURE() << "no error for a y_perm that moves the last axis";
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(StatusCode::kModel)) << e.what();
    EXPECT_NE(std::string(e.what()).find("y_perm"), std::string::npos) << e.what();
  }
}

TEST(OpsLinalg, ModelErrorsComeFromTheOpLayer) {
  Node gemm = MakeNode("Gemm", 2, 1);
  OpContext bad_dtype(gemm);
  ExpectError([&] { Infer(bad_dtype, {{DType::kInt8, {2, 2}}, {DType::kInt8, {2, 2}}}); },
              StatusCode::kModel, "Gemm on int8");
  Node pool = MakeNode("AveragePool", 1, 1, {{"kernel_shape", IntsAttr({2})}});
  OpContext bad_pool(pool);
  ExpectError([&] { Infer(bad_pool, {{DType::kUInt8, {1, 1, 4}}}); }, StatusCode::kModel,
              "AveragePool on uint8");
}

TEST(OpsLinalg, CpuKernelDTypes) {
  const KernelRegistry& cpu = CpuKernels();
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64}) {
    EXPECT_NE(cpu.Find(OpId::kGemm, t), nullptr) << DTypeName(t);
    EXPECT_NE(cpu.Find(OpId::kMatMul, t), nullptr) << DTypeName(t);
  }
  EXPECT_NE(cpu.Find(OpId::kEinsum, DType::kFloat64), nullptr);
  EXPECT_EQ(cpu.Find(OpId::kEinsum, DType::kInt32), nullptr);
  EXPECT_NE(cpu.Find(OpId::kMaxPool, DType::kInt8), nullptr);
  EXPECT_EQ(cpu.Find(OpId::kAveragePool, DType::kInt8), nullptr);
  for (OpId op : {OpId::kConv, OpId::kBatchNormalization, OpId::kInstanceNormalization,
                  OpId::kLayerNormalization}) {
    EXPECT_NE(cpu.Find(op, DType::kFloat32), nullptr) << OpName(op);
    EXPECT_EQ(cpu.Find(op, DType::kFloat64), nullptr) << OpName(op);
  }
}

}  // namespace
}  // namespace testing
}  // namespace kaiwu
