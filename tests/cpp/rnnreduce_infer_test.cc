// The op layer alone (no kernel): shape inference of Reduce*, ArgMax/ArgMin,
// LSTM and GRU sets the outputs and the params both backends read, and fails
// with kModel naming the node.
#include <gtest/gtest.h>

#include "kernel_harness.h"
#include "ops/op.h"
#include "ops/reduce.h"
#include "ops/rnn.h"

namespace kaiwu {
namespace {

using testing::IntAttr;
using testing::IntsAttr;
using testing::MakeNode;
using testing::Info;
using testing::Infer;
using testing::ExpectModelError;
using testing::StrAttr;

Attribute StrsAttr(std::vector<std::string> v) {
  Attribute a;
  a.kind = Attribute::Kind::kStrings;
  a.strings = std::move(v);
  return a;
}

TEST(RnnReduceInfer, ReduceAxesInputAndKeepdims) {
  const int64_t axes[] = {-2};
  Node node = MakeNode("ReduceMean", 2, 1, {{"keepdims", IntAttr(0)}});
  OpContext ctx = Infer(node, {Info(DType::kFloat64, {2, 3, 4}), Info(DType::kInt64, {1}, axes)});
  ASSERT_EQ(ctx.outputs.size(), 1u);
  EXPECT_EQ(ctx.outputs[0].dtype, DType::kFloat64);
  EXPECT_EQ(ctx.outputs[0].shape, (Shape{2, 4}));
  const ReduceParams& p = ctx.Params<ReduceParams>();
  EXPECT_EQ(p.kind, reduce::ReduceKind::kMean);
  EXPECT_EQ(p.reduced, (std::vector<bool>{false, true, false}));
  EXPECT_FALSE(p.copy);
  EXPECT_EQ(p.count, 3);
}

TEST(RnnReduceInfer, ReduceDefaultAxesAndNoop) {
  Node all = MakeNode("ReduceLogSumExp", 1, 1);
  OpContext ctx = Infer(all, {Info(DType::kFloat32, {2, 0, 4})});
  EXPECT_EQ(ctx.outputs[0].shape, (Shape{1, 1, 1}));
  EXPECT_EQ(ctx.Params<ReduceParams>().count, 0);
  EXPECT_EQ(ctx.Params<ReduceParams>().reduced, (std::vector<bool>{true, true, true}));

  Node noop = MakeNode("ReduceMax", 1, 1, {{"noop_with_empty_axes", IntAttr(1)}});
  OpContext n = Infer(noop, {Info(DType::kBool, {3, 5})});
  EXPECT_EQ(n.outputs[0].dtype, DType::kBool);
  EXPECT_EQ(n.outputs[0].shape, (Shape{3, 5}));
  EXPECT_TRUE(n.Params<ReduceParams>().copy);
  EXPECT_EQ(n.Params<ReduceParams>().reduced, (std::vector<bool>{false, false}));
}

TEST(RnnReduceInfer, ReduceErrors) {
  Node sum = MakeNode("ReduceSum", 1, 1, {{"axes", IntsAttr({1, -1})}});
  ExpectModelError(sum, {Info(DType::kFloat32, {2, 3})},
                   "ReduceSum node 'ReduceSum_under_test': axis -1 is repeated");
  Node range = MakeNode("ReduceSum", 1, 1, {{"axes", IntsAttr({2})}});
  ExpectModelError(range, {Info(DType::kFloat32, {2, 3})}, "axis 2 is out of range for rank 2");
  ExpectModelError(MakeNode("ReduceSum", 1, 1), {Info(DType::kBool, {2})},
                   "input 0 has dtype bool, expected one of: float32, float64, int32, int64, float16, "
                   "bfloat16");
  ExpectModelError(MakeNode("ReduceLogSumExp", 1, 1), {Info(DType::kInt32, {2})},
                   "expected one of: float32, float64, float16, bfloat16");
  ExpectModelError(MakeNode("ReduceProd", 1, 1), {Info(DType::kFloat32, Shape(17, 1))},
                   "rank 17 exceeds 16");
}

TEST(RnnReduceInfer, ArgReduce) {
  Node node = MakeNode("ArgMin", 1, 1, {{"axis", IntAttr(-1)}, {"select_last_index", IntAttr(1)}});
  OpContext ctx = Infer(node, {Info(DType::kInt16, {2, 3, 4})});
  EXPECT_EQ(ctx.outputs[0].dtype, DType::kInt64);
  EXPECT_EQ(ctx.outputs[0].shape, (Shape{2, 3, 1}));
  const ArgReduceParams& p = ctx.Params<ArgReduceParams>();
  EXPECT_FALSE(p.is_max);
  EXPECT_EQ(p.axis, 2);
  EXPECT_TRUE(p.select_last_index);

  Node drop = MakeNode("ArgMax", 1, 1, {{"keepdims", IntAttr(0)}});
  EXPECT_EQ(Infer(drop, {Info(DType::kFloat32, {5, 2})}).outputs[0].shape, (Shape{2}));
  ExpectModelError(drop, {Info(DType::kFloat32, {0, 2})}, "cannot take ArgMax over an empty axis");
  ExpectModelError(drop, {Info(DType::kFloat32, {})}, "input must have rank >= 1");
}

TEST(RnnReduceInfer, LstmParams) {
  // layout 1, bidirectional, one direction's activations given (used for both).
  Node node = MakeNode("LSTM", 8, 3,
                       {{"direction", StrAttr("bidirectional")},
                        {"layout", IntAttr(1)},
                        {"input_forget", IntAttr(1)},
                        {"activations", StrsAttr({"sigmoid", "Tanh", "HardSigmoid"})}});
  const int64_t B = 2, S = 5, I = 3, H = 4;
  TensorInfo none;
  OpContext ctx =
      Infer(node, {Info(DType::kFloat32, {B, S, I}), Info(DType::kFloat32, {2, 4 * H, I}),
                   Info(DType::kFloat32, {2, 4 * H, H}), none, Info(DType::kInt32, {B}), none,
                   Info(DType::kFloat32, {B, 2, H}), Info(DType::kFloat32, {2, 3 * H})});
  EXPECT_EQ(ctx.outputs[0].shape, (Shape{B, S, 2, H}));
  EXPECT_EQ(ctx.outputs[1].shape, (Shape{B, 2, H}));
  EXPECT_EQ(ctx.outputs[2].shape, (Shape{B, 2, H}));
  const RnnParams& p = ctx.Params<RnnParams>();
  EXPECT_EQ(p.gates, 4);
  EXPECT_EQ(p.dims.seq, S);
  EXPECT_EQ(p.dims.batch, B);
  EXPECT_EQ(p.dims.input, I);
  EXPECT_EQ(p.dims.hidden, H);
  EXPECT_EQ(p.dims.dirs, 2);
  EXPECT_EQ(p.dims.layout, 1);
  EXPECT_FALSE(p.dims.reverse);
  EXPECT_FALSE(p.dims.has_clip);
  EXPECT_FALSE(p.has_bias);
  EXPECT_TRUE(p.has_lens);
  EXPECT_FALSE(p.has_init_h);
  EXPECT_TRUE(p.has_init_c);
  EXPECT_TRUE(p.has_peep);
  EXPECT_TRUE(p.input_forget);
  ASSERT_EQ(p.activations.size(), 6u);
  EXPECT_EQ(p.activations[2].kind, RnnActKind::kHardSigmoid);
  EXPECT_FLOAT_EQ(p.activations[2].alpha, 0.2f);
  EXPECT_FLOAT_EQ(p.activations[2].beta, 0.5f);
  EXPECT_EQ(p.activations[3].kind, RnnActKind::kSigmoid);
  EXPECT_EQ(p.activation_names, (std::vector<std::string>{"sigmoid", "Tanh", "HardSigmoid",
                                                          "sigmoid", "Tanh", "HardSigmoid"}));
  // Index math of layout 1: Y[b, t, d, :], states [b, d, :].
  EXPECT_EQ(p.dims.YOffset(1, 1, 1), ((1 * S + 1) * 2 + 1) * H);
  EXPECT_EQ(p.dims.StateOffset(1, 1), (1 * 2 + 1) * H);
  EXPECT_EQ(p.dims.XRow(3, 1), 1 * S + 3);
}

TEST(RnnReduceInfer, GruParamsAndErrors) {
  Node node = MakeNode("GRU", 3, 2,
                       {{"direction", StrAttr("reverse")},
                        {"linear_before_reset", IntAttr(1)},
                        {"clip", testing::FloatAttr(2.5f)}});
  const Shape x{7, 2, 3}, w{1, 15, 3}, r{1, 15, 5};
  OpContext ctx =
      Infer(node, {Info(DType::kFloat32, x), Info(DType::kFloat32, w), Info(DType::kFloat32, r)});
  EXPECT_EQ(ctx.outputs[0].shape, (Shape{7, 1, 2, 5}));
  EXPECT_EQ(ctx.outputs[1].shape, (Shape{1, 2, 5}));
  const RnnParams& p = ctx.Params<RnnParams>();
  EXPECT_EQ(p.gates, 3);
  EXPECT_TRUE(p.dims.reverse);
  EXPECT_TRUE(p.dims.Backward(0));
  EXPECT_TRUE(p.dims.has_clip);
  EXPECT_FLOAT_EQ(p.dims.clip, 2.5f);
  EXPECT_TRUE(p.linear_before_reset);
  EXPECT_EQ(p.activation_names, (std::vector<std::string>{"Sigmoid", "Tanh"}));

  ExpectModelError(MakeNode("GRU", 3, 2, {{"hidden_size", IntAttr(4)}}),
                   {Info(DType::kFloat32, x), Info(DType::kFloat32, w), Info(DType::kFloat32, r)},
                   "GRU node 'GRU_under_test': hidden_size 4 does not match W (1, 15, 3)");
  ExpectModelError(MakeNode("GRU", 3, 2, {{"activations", StrsAttr({"Sigmoid", "Gelu"})}}),
                   {Info(DType::kFloat32, x), Info(DType::kFloat32, w), Info(DType::kFloat32, r)},
                   "unsupported activation 'Gelu'");
  ExpectModelError(MakeNode("GRU", 3, 2),
                   {Info(DType::kFloat64, x), Info(DType::kFloat32, w), Info(DType::kFloat32, r)},
                   "input 0 has dtype float64, expected one of: float32, float16, bfloat16");
  // A half session's input projection: X and W in one 16-bit type, Y in it too,
  // Y_h float32; R stays float32.
  for (DType t : {DType::kFloat16, DType::kBFloat16}) {
    OpContext half = Infer(MakeNode("GRU", 3, 2), {Info(t, x), Info(t, w), Info(DType::kFloat32, r)});
    EXPECT_EQ(half.outputs[0].dtype, t);
    EXPECT_EQ(half.outputs[0].shape, (Shape{7, 1, 2, 5}));
    EXPECT_EQ(half.outputs[1].dtype, DType::kFloat32);
  }
  ExpectModelError(MakeNode("GRU", 3, 2),
                   {Info(DType::kFloat16, x), Info(DType::kFloat32, w), Info(DType::kFloat32, r)},
                   "W is float32 but X is float16 (X and W share one type)");
  // R may be float16 with a float16 X (a GRU's FP16 recurrent products), not with bfloat16.
  OpContext half_r = Infer(MakeNode("GRU", 3, 2), {Info(DType::kFloat16, x), Info(DType::kFloat16, w),
                                                   Info(DType::kFloat16, r)});
  EXPECT_EQ(half_r.outputs[0].dtype, DType::kFloat16);
  EXPECT_EQ(half_r.outputs[1].dtype, DType::kFloat32);
  ExpectModelError(MakeNode("GRU", 3, 2),
                   {Info(DType::kBFloat16, x), Info(DType::kBFloat16, w), Info(DType::kBFloat16, r)},
                   "input 2 has dtype bfloat16, expected one of: float32");
  ExpectModelError(MakeNode("GRU", 3, 2),
                   {Info(DType::kFloat32, x), Info(DType::kFloat32, w), Info(DType::kFloat16, r)},
                   "input 2 has dtype float16, expected one of: float32");
}

}  // namespace
}  // namespace kaiwu
