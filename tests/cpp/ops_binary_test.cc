// The op layer alone (no kernel) on the binary elementwise family: output
// dtypes and shapes, the params kernels read, the dtype that keys the kernel
// tables, and model errors raised before any backend is asked.
#include <gtest/gtest.h>

#include <string>

#include "backends/kernel.h"
#include "kernel_harness.h"
#include "ops/binary.h"

namespace kaiwu {
namespace testing {
namespace {

std::string ModelError(const Node& node, std::vector<TensorInfo> inputs) {
  try {
    Infer(node, std::move(inputs));
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kModel) << e.what();
    return e.what();
  }
  ADD_FAILURE() << node.op_type << ": no error";
  return "";
}

TEST(OpsBinary, ArithmeticBroadcastsAndModReadsFmod) {
  Node add = MakeNode("Add", 2, 1);
  OpContext a = Infer(add, {Info(DType::kInt32, {3, 1, 4}), Info(DType::kInt32, {5, 1})});
  EXPECT_EQ(a.outputs[0].dtype, DType::kInt32);
  EXPECT_EQ(a.outputs[0].shape, (Shape{3, 5, 4}));
  EXPECT_EQ(a.params, nullptr);

  Node mod = MakeNode("Mod", 2, 1, {{"fmod", IntAttr(1)}});
  OpContext m = Infer(mod, {Info(DType::kFloat32, {4}), Info(DType::kFloat32, {})});
  EXPECT_TRUE(m.Params<ModParams>().fmod);
  EXPECT_EQ(m.outputs[0].shape, (Shape{4}));
  Node imod = MakeNode("Mod", 2, 1);
  EXPECT_FALSE(Infer(imod, {Info(DType::kInt64, {4}), Info(DType::kInt64, {4})})
                   .Params<ModParams>()
                   .fmod);

  Node mean = MakeNode("Mean", 3, 1);
  OpContext v = Infer(mean, {Info(DType::kFloat64, {2, 1}), Info(DType::kFloat64, {3}),
                             Info(DType::kFloat64, {1, 1, 3})});
  EXPECT_EQ(v.outputs[0].shape, (Shape{1, 2, 3}));
}

TEST(OpsBinary, PowKeepsTheBaseDtype) {
  Node pow = MakeNode("Pow", 2, 1);
  OpContext p = Infer(pow, {Info(DType::kInt64, {2, 3}), Info(DType::kInt8, {3})});
  EXPECT_EQ(p.outputs[0].dtype, DType::kInt64);
  EXPECT_EQ(p.outputs[0].shape, (Shape{2, 3}));
}

TEST(OpsBinary, ComparisonsGiveBool) {
  Node less = MakeNode("Less", 2, 1);
  OpContext c = Infer(less, {Info(DType::kInt16, {2, 1}), Info(DType::kInt16, {4})});
  EXPECT_EQ(c.outputs[0].dtype, DType::kBool);
  EXPECT_EQ(c.outputs[0].shape, (Shape{2, 4}));
  Node no = MakeNode("Not", 1, 1);
  EXPECT_EQ(Infer(no, {Info(DType::kBool, {5})}).outputs[0].shape, (Shape{5}));
}

TEST(OpsBinary, WhereKeysKernelsOnX) {
  Node where = MakeNode("Where", 3, 1);
  OpContext w = Infer(where, {Info(DType::kBool, {2, 1}), Info(DType::kInt64, {3}),
                              Info(DType::kInt64, {1})});
  EXPECT_EQ(w.outputs[0].dtype, DType::kInt64);
  EXPECT_EQ(w.outputs[0].shape, (Shape{2, 3}));
  EXPECT_EQ(GetOpDef(OpId::kWhere).type_input, 1);
  EXPECT_EQ(KernelKeyDType(w), DType::kInt64);
}

TEST(OpsBinary, CastTargets) {
  Node cast = MakeNode("Cast", 1, 1, {{"to", IntAttr(7)}});
  OpContext c = Infer(cast, {Info(DType::kFloat32, {2, 3})});
  EXPECT_EQ(c.outputs[0].dtype, DType::kInt64);
  EXPECT_EQ(c.outputs[0].shape, (Shape{2, 3}));
  EXPECT_EQ(KernelKeyDType(c), DType::kFloat32);
  Node like = MakeNode("CastLike", 2, 1);
  EXPECT_EQ(Infer(like, {Info(DType::kInt8, {4}), Info(DType::kBool, {})}).outputs[0].dtype,
            DType::kBool);
  EXPECT_EQ(DTypeFromOnnxCode(11), DType::kFloat64);
  EXPECT_EQ(DTypeFromOnnxCode(8), DType::kUndefined);  // string
}

TEST(OpsBinary, FusedElementwiseChainIsParsedOnce) {
  Node n = MakeNode("FusedElementwise", 2, 1,
                    {{"ops", Attribute{}}, {"operand", IntsAttr({0, 1})},
                     {"swapped", IntsAttr({0, 1})}, {"params", FloatsAttr({-1, 2, 0, 0})}});
  n.domain = "kaiwu";
  n.attrs["ops"].kind = Attribute::Kind::kStrings;
  n.attrs["ops"].strings = {"Clip", "Sub"};
  OpContext f = Infer(n, {Info(DType::kFloat32, {3, 1}), Info(DType::kFloat32, {4})});
  EXPECT_EQ(f.outputs[0].shape, (Shape{3, 4}));
  const auto& steps = f.Params<FusedElementwiseParams>().steps;
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].op, FusedOp::kClip);
  EXPECT_EQ(steps[0].p0, -1.f);
  EXPECT_EQ(steps[0].p1, 2.f);
  EXPECT_EQ(steps[1].op, FusedOp::kSub);
  EXPECT_EQ(steps[1].operand, 1);
  EXPECT_TRUE(steps[1].swapped);
  EXPECT_TRUE(FusedElementwiseSupports("LeakyRelu"));
  EXPECT_FALSE(FusedElementwiseSupports("Gelu"));
}

TEST(OpsBinary, ModelErrorsComeFromTheOpLayer) {
  Node prelu = MakeNode("PRelu", 2, 1);
  EXPECT_EQ(ModelError(prelu, {Info(DType::kFloat32, {5}), Info(DType::kFloat32, {3, 5})}),
            prelu.Describe() + ": input shape (3, 5) does not broadcast to (5,)");
  Node sum = MakeNode("Sum", 2, 1);
  EXPECT_EQ(ModelError(sum, {Info(DType::kInt32, {2}), Info(DType::kInt32, {2})}),
            sum.Describe() +
                ": input 0 has dtype int32, expected one of: float32, float64, float16, bfloat16");
  Node mod = MakeNode("Mod", 2, 1);
  EXPECT_EQ(ModelError(mod, {Info(DType::kFloat32, {2}), Info(DType::kFloat32, {2})}),
            mod.Describe() + ": fmod must be 1 for floating-point inputs");
  Node cast = MakeNode("Cast", 1, 1, {{"to", IntAttr(99)}});
  EXPECT_EQ(ModelError(cast, {Info(DType::kFloat32, {2})}),
            cast.Describe() + ": unsupported target element type 99");
}

TEST(OpsBinary, CpuKernelTablesListTheirDtypes) {
  const KernelRegistry& cpu = CpuKernels();
  EXPECT_NE(cpu.Find(OpId::kAdd, DType::kInt8), nullptr);
  EXPECT_EQ(cpu.Find(OpId::kAdd, DType::kBool), nullptr);
  EXPECT_EQ(cpu.Find(OpId::kSum, DType::kInt32), nullptr);
  EXPECT_NE(cpu.Find(OpId::kEqual, DType::kBool), nullptr);
  EXPECT_EQ(cpu.Find(OpId::kLess, DType::kBool), nullptr);
  EXPECT_NE(cpu.Find(OpId::kWhere, DType::kFloat16), nullptr);
  EXPECT_EQ(cpu.Find(OpId::kFusedElementwise, DType::kFloat64), nullptr);
}

}  // namespace
}  // namespace testing
}  // namespace kaiwu
