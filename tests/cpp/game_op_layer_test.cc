// The game family's op layer alone (ops/game.h, ops/resize.h): shape inference
// sets output dtypes and shapes and the checked attributes with no kernel
// involved; model errors name the node; the CPU kernel tables hold the dtypes
// each kernel computes in, and refuse the others as kUnsupported.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernel_harness.h"
#include "ops/game.h"
#include "ops/resize.h"

namespace kaiwu {
namespace {

using testing::FloatAttr;
using testing::IntAttr;
using testing::IntsAttr;
using testing::MakeNode;
using testing::Info;
using testing::Infer;
using testing::StrAttr;

// The message of the kaiwu::Error `fn` throws, after checking its code.
template <typename F>
std::string ErrorOf(F fn, StatusCode code) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(code)) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

TEST(GameOpLayer, ResizeTapsAndShape) {
  const Node node = MakeNode("Resize", 3, 1, {{"mode", StrAttr("linear")},
                                              {"axes", IntsAttr({2, 3})},
                                              {"extrapolation_value", FloatAttr(1.5f)}});
  const std::vector<float> scales = {2.f, 0.5f};
  OpContext ctx =
      Infer(node, {Info(DType::kFloat32, {1, 3, 4, 8}), TensorInfo{},
                   Info(DType::kFloat32, {2}, scales.data())});
  ASSERT_EQ(ctx.outputs.size(), 1u);
  EXPECT_EQ(ctx.outputs[0].dtype, DType::kFloat32);
  EXPECT_EQ(ShapeToString(ctx.outputs[0].shape), ShapeToString({1, 3, 8, 4}));
  const ResizeParams& p = ctx.Params<ResizeParams>();
  EXPECT_EQ(ShapeToString(p.out), ShapeToString({1, 3, 8, 4}));
  EXPECT_EQ(p.extrapolation, 1.5f);
  ASSERT_EQ(p.axes.size(), 4u);
  EXPECT_TRUE(p.axes[0].identity);
  EXPECT_TRUE(p.axes[1].identity);
  EXPECT_EQ(p.axes[1].offset[2], 2 * 32);  // identity axes step by the input stride
  EXPECT_FALSE(p.axes[2].identity);
  EXPECT_EQ(p.axes[2].taps, 2);
  // half_pixel, scale 0.5: output 0 reads x = 0.5, halfway between inputs 0 and 1.
  EXPECT_EQ(p.axes[3].taps, 2);
  EXPECT_EQ(p.axes[3].offset[0], 0);
  EXPECT_EQ(p.axes[3].offset[1], 1);
  EXPECT_FLOAT_EQ(p.axes[3].weight[0], 0.5f);
  EXPECT_FLOAT_EQ(p.axes[3].weight[1], 0.5f);
}

TEST(GameOpLayer, ResizeModelErrors) {
  const std::vector<float> scales = {1.f, 1.f, 2.f, 2.f};
  const std::vector<TensorInfo> inputs = {Info(DType::kInt32, {1, 1, 2, 2}), TensorInfo{},
                                          Info(DType::kFloat32, {4}, scales.data())};
  const Node linear = MakeNode("Resize", 3, 1, {{"mode", StrAttr("linear")}});
  EXPECT_EQ(ErrorOf([&] { Infer(linear, inputs); }, StatusCode::kModel),
            linear.Describe() + ": linear and cubic modes need float32 or float64 input, got int32");
  const Node both = MakeNode("Resize", 4, 1);
  const std::vector<int64_t> sizes = {1, 1, 4, 4};
  std::vector<TensorInfo> four = inputs;
  four.push_back(Info(DType::kInt64, {4}, sizes.data()));
  EXPECT_EQ(ErrorOf([&] { Infer(both, four); }, StatusCode::kModel),
            both.Describe() + ": exactly one of scales and sizes must be given");
  // Nearest takes any dtype.
  const Node nearest = MakeNode("Resize", 3, 1);
  EXPECT_EQ(Infer(nearest, inputs).outputs[0].dtype, DType::kInt32);
}

TEST(GameOpLayer, ScatterParams) {
  const Node elements =
      MakeNode("ScatterElements", 3, 1, {{"axis", IntAttr(-1)}, {"reduction", StrAttr("max")}});
  OpContext ctx = Infer(elements, {Info(DType::kFloat64, {4, 5}), Info(DType::kInt32, {2, 3}),
                                        Info(DType::kFloat64, {2, 3})});
  EXPECT_EQ(ShapeToString(ctx.outputs[0].shape), ShapeToString({4, 5}));
  EXPECT_EQ(ctx.outputs[0].dtype, DType::kFloat64);
  EXPECT_EQ(ctx.Params<ScatterParams>().axis, 1);
  EXPECT_EQ(ctx.Params<ScatterParams>().reduction, Reduction::kMax);
  EXPECT_STREQ(ReductionName(Reduction::kMax), "max");

  const Node nd = MakeNode("ScatterND", 3, 1, {{"reduction", StrAttr("mul")}});
  OpContext nd_ctx = Infer(nd, {Info(DType::kInt64, {4, 5, 6}), Info(DType::kInt64, {3, 2}),
                                     Info(DType::kInt64, {3, 6})});
  EXPECT_EQ(ShapeToString(nd_ctx.outputs[0].shape), ShapeToString({4, 5, 6}));
  EXPECT_EQ(nd_ctx.Params<ScatterParams>().reduction, Reduction::kMul);

  const Node bad = MakeNode("ScatterND", 3, 1, {{"reduction", StrAttr("xor")}});
  EXPECT_EQ(ErrorOf([&] {
              Infer(bad, {Info(DType::kInt64, {4, 5}), Info(DType::kInt64, {3, 1}),
                          Info(DType::kInt64, {3, 5})});
            }, StatusCode::kModel),
            bad.Describe() + ": unknown reduction 'xor'");
  EXPECT_EQ(ErrorOf([&] {
              Infer(nd, {Info(DType::kInt64, {4, 5}), Info(DType::kInt64, {3, 1}),
                         Info(DType::kInt64, {3, 4})});
            }, StatusCode::kModel),
            nd.Describe() + ": updates have shape (3, 4), expected (3, 5)");
}

TEST(GameOpLayer, TopKAndCumSumParams) {
  const std::vector<int64_t> k = {3};
  const Node topk = MakeNode("TopK", 2, 2, {{"axis", IntAttr(0)}, {"largest", IntAttr(0)}});
  OpContext ctx =
      Infer(topk, {Info(DType::kInt16, {7, 2}), Info(DType::kInt64, {1}, k.data())});
  ASSERT_EQ(ctx.outputs.size(), 2u);
  EXPECT_EQ(ctx.outputs[0].dtype, DType::kInt16);
  EXPECT_EQ(ctx.outputs[1].dtype, DType::kInt64);
  EXPECT_EQ(ShapeToString(ctx.outputs[1].shape), ShapeToString({3, 2}));
  EXPECT_EQ(ctx.Params<TopKParams>().axis, 0);
  EXPECT_EQ(ctx.Params<TopKParams>().k, 3);
  EXPECT_FALSE(ctx.Params<TopKParams>().largest);
  EXPECT_EQ(ErrorOf([&] {
              Infer(topk, {Info(DType::kInt16, {2, 2}), Info(DType::kInt64, {1}, k.data())});
            }, StatusCode::kModel),
            topk.Describe() + ": K = 3 is out of range for an axis of size 2");

  const std::vector<int32_t> axis = {-2};
  const Node cumsum = MakeNode("CumSum", 2, 1, {{"reverse", IntAttr(1)}});
  OpContext cs =
      Infer(cumsum, {Info(DType::kInt32, {2, 3, 4}), Info(DType::kInt32, {}, axis.data())});
  EXPECT_EQ(ShapeToString(cs.outputs[0].shape), ShapeToString({2, 3, 4}));
  EXPECT_EQ(cs.Params<CumSumParams>().axis, 1);
  EXPECT_TRUE(cs.Params<CumSumParams>().reverse);
  EXPECT_FALSE(cs.Params<CumSumParams>().exclusive);
}

// Shape inference accepts the dtype; the CPU table has no kernel for it.
TEST(GameOpLayer, CpuTablesRefuseOtherDTypes) {
  const Node node = MakeNode("ScatterND", 3, 1);
  PrepareContext ctx = Infer<PrepareContext>(
      node, {Info(DType::kFloat16, {4}), Info(DType::kInt64, {2, 1}), Info(DType::kFloat16, {2})});
  EXPECT_EQ(ErrorOf([&] { PrepareKernel(CpuKernels(), "CPU", ctx); }, StatusCode::kUnsupported),
            node.Describe() + ": dtype float16 of input 0 is not supported by the CPU backend");
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kUInt8, DType::kInt16,
                   DType::kInt32, DType::kInt64, DType::kBool})
    EXPECT_NE(CpuKernels().Find(OpId::kScatterND, dt), nullptr) << DTypeName(dt);
  EXPECT_NE(CpuKernels().Find(OpId::kResize, DType::kFloat16), nullptr);
  EXPECT_EQ(CpuKernels().Find(OpId::kCumSum, DType::kInt16), nullptr);
  EXPECT_EQ(CpuKernels().Find(OpId::kTopK, DType::kBool), nullptr);
}

}  // namespace
}  // namespace kaiwu
