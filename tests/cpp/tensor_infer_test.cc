// The op layer alone (no kernel): shape inference of the layout and indexing
// family sets the outputs, aliases and params both backends read, and fails
// with kModel naming the node; the strided-copy views both backends copy
// (copy_geometry.h) follow from those params.
#include <gtest/gtest.h>

#include <cstring>

#include "backends/copy_geometry.h"
#include "kernel_harness.h"
#include "ops/op.h"
#include "ops/tensor.h"

namespace kaiwu {
namespace {

using testing::FloatAttr;
using testing::IntAttr;
using testing::IntsAttr;
using testing::MakeNode;
using testing::Info;
using testing::Infer;
using testing::ExpectModelError;
using testing::StrAttr;

TEST(TensorInfer, ConcatAndSplit) {
  Node concat = MakeNode("Concat", 2, 1, {{"axis", IntAttr(-1)}});
  OpContext c = Infer(concat, {Info(DType::kInt32, {2, 3}), Info(DType::kInt32, {2, 5})});
  EXPECT_EQ(c.outputs[0].dtype, DType::kInt32);
  EXPECT_EQ(c.outputs[0].shape, (Shape{2, 8}));
  EXPECT_EQ(c.Params<AxisParams>().axis, 1);
  ExpectModelError(MakeNode("Concat", 2, 1), {Info(DType::kInt32, {2}), Info(DType::kInt32, {2})},
                   "attribute 'axis' is required");

  const int64_t sizes[] = {1, 4};
  Node split = MakeNode("Split", 2, 2, {{"axis", IntAttr(-1)}});
  OpContext s = Infer(split, {Info(DType::kFloat16, {3, 5}), Info(DType::kInt64, {2}, sizes)});
  EXPECT_EQ(s.outputs[0].shape, (Shape{3, 1}));
  EXPECT_EQ(s.outputs[1].shape, (Shape{3, 4}));
  EXPECT_EQ(s.outputs[1].dtype, DType::kFloat16);
  EXPECT_EQ(s.Params<AxisParams>().axis, 1);
  Node chunks = MakeNode("Split", 1, 3, {{"num_outputs", IntAttr(3)}});
  OpContext k = Infer(chunks, {Info(DType::kFloat32, {7})});
  EXPECT_EQ(k.outputs[2].shape, (Shape{1}));
}

TEST(TensorInfer, ViewsAliasTheirInput) {
  const int64_t target[] = {0, -1};
  const Node reshape = MakeNode("Reshape", 2, 1);
  OpContext r = Infer(reshape, {Info(DType::kBool, {2, 3, 4}), Info(DType::kInt64, {2}, target)});
  EXPECT_EQ(r.outputs[0].shape, (Shape{2, 12}));
  EXPECT_EQ(r.alias, (std::vector<int>{0}));
  const int64_t axes[] = {1};
  const Node unsqueeze = MakeNode("Unsqueeze", 2, 1);
  OpContext u = Infer(unsqueeze, {Info(DType::kFloat32, {3}), Info(DType::kInt64, {1}, axes)});
  EXPECT_EQ(u.outputs[0].shape, (Shape{3, 1}));
  EXPECT_EQ(u.alias[0], 0);

  const Node dropout = MakeNode("Dropout", 1, 2);
  OpContext d = Infer(dropout, {Info(DType::kFloat64, {4, 2})});
  EXPECT_EQ(d.alias, (std::vector<int>{0, -1}));
  EXPECT_EQ(d.outputs[1].dtype, DType::kBool);
  EXPECT_EQ(d.outputs[1].shape, (Shape{4, 2}));
  ExpectModelError(MakeNode("Dropout", 1, 1), {Info(DType::kInt32, {2})},
                   "input 0 has dtype int32, expected one of: float32, float64, float16, bfloat16");
}

TEST(TensorInfer, TransposeSliceExpandTileViews) {
  const Shape in{2, 3, 4};
  const Node transpose = MakeNode("Transpose", 1, 1, {{"perm", IntsAttr({2, 0, 1})}});
  OpContext t = Infer(transpose, {Info(DType::kFloat32, in)});
  EXPECT_EQ(t.outputs[0].shape, (Shape{4, 2, 3}));
  const CopyView tv = TransposeCopyView(in, t.Params<TransposeParams>());
  EXPECT_EQ(tv.shape, (Shape{4, 2, 3}));
  EXPECT_EQ(tv.strides, (std::vector<int64_t>{1, 12, 4}));

  // x[:, ::-2, 1:3] over a (2, 3, 4) input.
  const int64_t starts[] = {-1, 1}, ends[] = {-100, 3}, axes[] = {1, 2}, steps[] = {-2, 1};
  const Node slice = MakeNode("Slice", 5, 1);
  OpContext s = Infer(slice, {Info(DType::kInt64, in), Info(DType::kInt64, {2}, starts),
                              Info(DType::kInt64, {2}, ends), Info(DType::kInt64, {2}, axes),
                              Info(DType::kInt64, {2}, steps)});
  EXPECT_EQ(s.outputs[0].shape, (Shape{2, 2, 2}));
  const SliceParams& sp = s.Params<SliceParams>();
  EXPECT_EQ(sp.starts, (std::vector<int64_t>{0, 2, 1}));
  EXPECT_EQ(sp.steps, (std::vector<int64_t>{1, -2, 1}));
  const CopyView sv = SliceCopyView(in, sp, s.outputs[0].shape);
  EXPECT_EQ(sv.strides, (std::vector<int64_t>{12, -8, 1}));
  EXPECT_EQ(sv.offset, 2 * 4 + 1);

  const int64_t shape[] = {3, 1, 4};
  const Node expand = MakeNode("Expand", 2, 1);
  OpContext e = Infer(expand, {Info(DType::kUInt8, {3, 1}), Info(DType::kInt64, {3}, shape)});
  EXPECT_EQ(e.outputs[0].shape, (Shape{3, 3, 4}));
  EXPECT_EQ(ExpandCopyView({3, 1}, e.outputs[0].shape).strides, (std::vector<int64_t>{0, 1, 0}));

  const int64_t repeats[] = {2, 3};
  const Node tile = MakeNode("Tile", 2, 1);
  OpContext r = Infer(tile, {Info(DType::kInt16, {2, 5}), Info(DType::kInt64, {2}, repeats)});
  EXPECT_EQ(r.outputs[0].shape, (Shape{4, 15}));
  const CopyView rv = TileCopyView({2, 5}, r.Params<TileParams>());
  EXPECT_EQ(rv.shape, (Shape{2, 2, 3, 5}));
  EXPECT_EQ(rv.strides, (std::vector<int64_t>{0, 5, 0, 1}));
}

TEST(TensorInfer, GatherFamily) {
  const Node gather = MakeNode("Gather", 2, 1, {{"axis", IntAttr(-2)}});
  OpContext g = Infer(gather, {Info(DType::kFloat32, {5, 6, 7}), Info(DType::kInt32, {2, 3})});
  EXPECT_EQ(g.outputs[0].shape, (Shape{5, 2, 3, 7}));
  EXPECT_EQ(g.Params<AxisParams>().axis, 1);
  ExpectModelError(MakeNode("Gather", 2, 1),
                   {Info(DType::kFloat32, {5}), Info(DType::kFloat32, {1})},
                   "input 1 has dtype float32, expected one of: int64, int32");

  const Node gather_nd = MakeNode("GatherND", 2, 1, {{"batch_dims", IntAttr(1)}});
  OpContext nd = Infer(gather_nd, {Info(DType::kInt64, {2, 3, 4}), Info(DType::kInt64, {2, 5, 1})});
  EXPECT_EQ(nd.outputs[0].shape, (Shape{2, 5, 4}));
  EXPECT_EQ(nd.Params<GatherNDParams>().batch_dims, 1);

  const float depth = 4.f;
  const Node onehot = MakeNode("OneHot", 3, 1, {{"axis", IntAttr(1)}});
  OpContext o = Infer(onehot, {Info(DType::kInt32, {2, 3}), Info(DType::kFloat32, {1}, &depth),
                               Info(DType::kInt64, {2})});
  EXPECT_EQ(o.outputs[0].dtype, DType::kInt64);
  EXPECT_EQ(o.outputs[0].shape, (Shape{2, 4, 3}));
  EXPECT_EQ(o.Params<OneHotParams>().axis, 1);
  EXPECT_EQ(o.Params<OneHotParams>().depth, 4);
  EXPECT_EQ(KernelKeyDType(o), DType::kInt64);  // keyed on the values
}

TEST(TensorInfer, Pad) {
  const int64_t pads[] = {1, -1, 2, 0}, axes[] = {-1, 0};
  const Node pad = MakeNode("Pad", 4, 1, {{"mode", StrAttr("reflect")}});
  OpContext p = Infer(pad, {Info(DType::kFloat32, {3, 4}), Info(DType::kInt64, {4}, pads),
                            TensorInfo{}, Info(DType::kInt64, {2}, axes)});
  EXPECT_EQ(p.outputs[0].shape, (Shape{2, 7}));
  const PadParams& pp = p.Params<PadParams>();
  EXPECT_EQ(pp.mode, PadMode::kReflect);
  EXPECT_EQ(pp.begin, (std::vector<int64_t>{-1, 1}));
  EXPECT_FALSE(pp.has_value_input);

  Node old = MakeNode("Pad", 1, 1, {{"pads", IntsAttr({0, 1})}, {"value", FloatAttr(7.f)}});
  old.opset = 2;
  OpContext q = Infer(old, {Info(DType::kInt32, {2})});
  EXPECT_EQ(q.outputs[0].shape, (Shape{3}));
  int32_t v = 0;
  std::memcpy(&v, q.Params<PadParams>().default_value, sizeof(v));
  EXPECT_EQ(v, 7);

  EXPECT_EQ(PadSourceCoord(-2, 4, PadMode::kReflect), 2);
  EXPECT_EQ(PadSourceCoord(5, 4, PadMode::kWrap), 1);
  EXPECT_EQ(PadSourceCoord(-3, 4, PadMode::kEdge), 0);
  EXPECT_EQ(PadSourceCoord(4, 4, PadMode::kConstant), -1);
  ExpectModelError(MakeNode("Pad", 2, 1, {{"mode", StrAttr("mirror")}}),
                   {Info(DType::kFloat32, {3}), Info(DType::kInt64, {2}, pads)},
                   "unknown mode 'mirror'");
}

TEST(TensorInfer, KernelTablesListTheDTypes) {
  const KernelRegistry& cpu = CpuKernels();
  for (OpId op :
       {OpId::kConcat, OpId::kSplit, OpId::kTranspose, OpId::kSlice, OpId::kExpand, OpId::kTile,
        OpId::kGather, OpId::kGatherElements, OpId::kGatherND, OpId::kOneHot, OpId::kPad,
        OpId::kReshape, OpId::kFlatten, OpId::kSqueeze, OpId::kUnsqueeze, OpId::kIdentity}) {
    for (DType d : {KAIWU_ALL_DTYPES}) EXPECT_NE(cpu.Find(op, d), nullptr) << OpName(op);
    for (const KernelRegistry::Entry& e : cpu.entries())
      if (e.op == op) EXPECT_NE(e.dtype, DType::kUndefined) << OpName(op);
  }
  EXPECT_NE(cpu.Find(OpId::kDropout, DType::kFloat16), nullptr);
  EXPECT_EQ(cpu.Find(OpId::kDropout, DType::kInt32), nullptr);
}

}  // namespace
}  // namespace kaiwu
