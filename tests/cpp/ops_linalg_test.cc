// The op layer alone (no kernel) for Gemm, MatMul, Einsum, Conv, the pools and
// the normalisations: output shapes and the params their kernels read; and the
// dtypes of the CPU kernel table.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

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
