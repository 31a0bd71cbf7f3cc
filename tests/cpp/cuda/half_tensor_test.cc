// CUDA float16 / bfloat16 kernels beyond the elementwise family, against the
// CPU float32 kernels on the same rounded inputs (half_harness.h: float16 1e-3
// relative, bfloat16 8e-3): Softmax / LogSoftmax / Hardmax, the pools, the
// reductions and ArgMax / ArgMin (sums accumulate in float, so a long sum is
// as close as a short one); and the data-movement ops, which must move 16-bit
// elements bit for bit as the CPU does.
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdangling-else"
#include "../elementwise_test_util.h"
#pragma GCC diagnostic pop
#include "half_harness.h"

namespace kaiwu {
namespace testing {
namespace {

const DType kHalves[] = {DType::kFloat16, DType::kBFloat16};

TEST(CudaHalf, SoftmaxFamily) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(201);
  struct Case {
    Shape shape;
    int64_t axis;
  };
  // Short rows (8 / 16 / 32 lanes a row), warp rows, block rows (> 1024), strided
  // columns, one-element rows.
  const std::vector<Case> cases = {{{5, 37}, -1}, {{3, 1500}, 1}, {{2, 7, 5}, 1}, {{4, 1}, -1},
                                   {{1, 9}, 0},   {{33, 6}, 1},   {{67, 32}, -1}, {{9, 120}, -1},
                                   {{6, 300}, -1}};
  for (DType dt : kHalves) {
    for (const Case& c : cases) {
      Tensor x = RandomTensor(c.shape, rng, -6.f, 6.f);
      const std::map<std::string, Attribute> attrs = {{"axis", IntAttr(c.axis)}};
      CheckHalf(MakeNode("Softmax", 1, 1, attrs), {x}, dt, HalfRtol(dt), 1e-6f);
      // LogSoftmax: the result's error is relative to the log terms' size.
      CheckHalf(MakeNode("LogSoftmax", 1, 1, attrs), {x}, dt, HalfRtol(dt), 1e-3f);
      // Hardmax on values with ties: the same first maximum.
      Tensor t = x;
      for (int64_t i = 0; i < t.size(); ++i) t.As<float>()[i] = std::round(t.As<float>()[i]);
      CheckHalf(MakeNode("Hardmax", 1, 1, attrs), {t}, dt, 0, 0);
    }
  }
}

TEST(CudaHalf, Pools) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(202);
  for (DType dt : kHalves) {
    Tensor x = RandomTensor({2, 3, 11, 9}, rng, -4.f, 4.f);
    const std::map<std::string, Attribute> win = {{"kernel_shape", IntsAttr({3, 3})},
                                                  {"strides", IntsAttr({2, 2})},
                                                  {"pads", IntsAttr({1, 1, 1, 1})}};
    CheckHalf(MakeNode("MaxPool", 1, 1, win), {x}, dt, 0, 0);  // a selection: exact
    CheckHalf(MakeNode("MaxPool", 1, 2, win), {x}, dt, 0, 0);  // with Indices
    for (int64_t include : {0, 1}) {
      auto attrs = win;
      attrs["count_include_pad"] = IntAttr(include);
      CheckHalf(MakeNode("AveragePool", 1, 1, attrs), {x}, dt);
    }
    auto ceil = win;
    ceil["ceil_mode"] = IntAttr(1);
    CheckHalf(MakeNode("AveragePool", 1, 1, ceil), {x}, dt);
    CheckHalf(MakeNode("MaxPool", 1, 1, {{"kernel_shape", IntsAttr({2})}}),
              {RandomTensor({3, 4, 17}, rng)}, dt, 0, 0);  // 1-D
    // Global pools: a plane of 9 * 11, and a long one that a whole block sums.
    for (const Shape& s : {Shape{2, 3, 11, 9}, Shape{1, 2, 128, 129}, Shape{3, 5, 1}}) {
      Tensor g = RandomTensor(s, rng, 0.f, 4.f);
      CheckHalf(MakeNode("GlobalAveragePool", 1, 1), {g}, dt);
      CheckHalf(MakeNode("GlobalMaxPool", 1, 1), {g}, dt, 0, 0);
    }
  }
}

TEST(CudaHalf, ReductionsAccumulateInFloat) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(203);
  const std::vector<std::vector<int64_t>> axes_cases = {{1}, {2}, {0, 2}, {0, 1, 2}};
  for (DType dt : kHalves) {
    // Positive values: a sum of 8000 of them does not cancel, so a relative
    // bound holds; float16 sums past 2048 would lose ulps if accumulated in half.
    Tensor x = RandomTensor({4, 33, 65}, rng, 0.f, 1.f);
    for (const auto& axes : axes_cases) {
      Tensor ax = MakeTensor<int64_t>({static_cast<int64_t>(axes.size())}, axes);
      for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2",
                             "ReduceL1", "ReduceSumSquare", "ReduceLogSumExp"}) {
        for (int64_t keep : {0, 1})
          CheckHalf(MakeNode(op, 2, 1, {{"keepdims", IntAttr(keep)}}), {x, ax}, dt,
                    HalfRtol(dt), 1e-5f, {1});
      }
    }
    Tensor big = RandomTensor({2, 5000}, rng, 0.f, 1.f);  // one block per output
    Tensor last = MakeTensor<int64_t>({1}, {1});
    CheckHalf(MakeNode("ReduceSum", 2, 1), {big, last}, dt, HalfRtol(dt), 1e-5f, {1});
    CheckHalf(MakeNode("ReduceMean", 2, 1), {big, last}, dt, HalfRtol(dt), 1e-5f, {1});
    // ArgMax / ArgMin on values with ties: the first (or last) best index.
    Tensor t = RandomTensor({6, 17, 5}, rng, -3.f, 3.f);
    for (int64_t i = 0; i < t.size(); ++i) t.As<float>()[i] = std::round(t.As<float>()[i]);
    for (const char* op : {"ArgMax", "ArgMin"})
      for (int64_t axis : {0, 1, 2})
        for (int64_t last_index : {0, 1})
          CheckHalf(MakeNode(op, 1, 1,
                             {{"axis", IntAttr(axis)}, {"select_last_index", IntAttr(last_index)}}),
                    {t}, dt, 0, 0);
  }
}

TEST(CudaHalf, Normalizations) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(205);
  for (DType dt : kHalves) {
    for (bool f32_params : {false, true}) {
      const std::vector<int> keep = f32_params ? std::vector<int>{1, 2, 3, 4} : std::vector<int>{};
      Tensor x = RandomTensor({3, 6, 5, 7}, rng, -2.f, 2.f);
      Tensor scale = RandomTensor({6}, rng, 0.5f, 1.5f), bias = RandomTensor({6}, rng);
      Tensor mean = RandomTensor({6}, rng), var = RandomTensor({6}, rng, 0.2f, 2.f);
      CheckHalf(MakeNode("BatchNormalization", 5, 1), {x, scale, bias, mean, var}, dt,
                HalfRtol(dt), 1e-4f, {}, keep);
      CheckHalf(MakeNode("InstanceNormalization", 3, 1), {x, scale, bias}, dt, HalfRtol(dt),
                1e-4f, {}, keep);
      // LayerNormalization over the last dim, and over the last two with a
      // broadcast Scale; with the Mean / InvStdDev outputs (float32).
      Tensor y = RandomTensor({4, 9, 33}, rng, -3.f, 3.f);
      Tensor s1 = RandomTensor({33}, rng, 0.5f, 1.5f), b1 = RandomTensor({33}, rng);
      CheckHalf(MakeNode("LayerNormalization", 3, 3), {y, s1, b1}, dt, HalfRtol(dt), 1e-4f, {},
                keep);
      Tensor s2 = RandomTensor({1, 33}, rng, 0.5f, 1.5f);
      CheckHalf(MakeNode("LayerNormalization", 2, 1, {{"axis", IntAttr(1)}}), {y, s2}, dt,
                HalfRtol(dt), 1e-4f, {}, keep);
      Tensor units = RandomTensor({300, 64}, rng, -3.f, 3.f);  // many short rows
      Tensor su = RandomTensor({64}, rng, 0.5f, 1.5f), bu = RandomTensor({64}, rng);
      CheckHalf(MakeNode("LayerNormalization", 3, 3), {units, su, bu}, dt, HalfRtol(dt), 1e-4f, {},
                keep);
      Tensor wide = RandomTensor({2, 3000}, rng, -3.f, 3.f);
      Tensor sw = RandomTensor({3000}, rng, 0.5f, 1.5f);
      CheckHalf(MakeNode("LayerNormalization", 2, 1), {wide, sw}, dt, HalfRtol(dt), 1e-4f, {},
                keep);
    }
    // Parameters of two different dtypes are a model error.
    ExpectModelError(MakeNode("LayerNormalization", 3, 1),
                     {Info(dt, {2, 4}), Info(dt, {4}), Info(DType::kFloat32, {4})},
                     "input 2 has dtype float32, input 1 has");
  }
}

// Data movement: the CPU's result on the same 16-bit tensors, bit for bit.
void CheckMove(const Node& node, const std::vector<Tensor>& inputs,
               const std::vector<int>& const_inputs) {
  std::string what = node.op_type;
  for (const Tensor& t : inputs)
    if (t.dtype() != DType::kUndefined) what += std::string(" ") + DTypeName(t.dtype());
  const std::vector<Tensor> want = RunNode(node, inputs);
  const std::vector<Tensor> got = RunNodeCuda(node, inputs, const_inputs);
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(got[k].dtype(), want[k].dtype()) << what;
    ASSERT_EQ(got[k].shape(), want[k].shape()) << what;
    EXPECT_EQ(0, std::memcmp(got[k].data(), want[k].data(), want[k].bytes())) << what;
  }
}

TEST(CudaHalf, DataMovementBothTypes) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(204);
  for (DType dt : kHalves) {
    Tensor x = Narrow(RandomTensor({2, 3, 5, 7}, rng), dt);
    Tensor y = Narrow(RandomTensor({2, 4, 5, 7}, rng), dt);
    auto i64 = [](std::vector<int64_t> v) {
      return MakeTensor<int64_t>({static_cast<int64_t>(v.size())}, v);
    };
    CheckMove(MakeNode("Reshape", 2, 1), {x, i64({6, -1})}, {1});
    CheckMove(MakeNode("Flatten", 1, 1, {{"axis", IntAttr(2)}}), {x}, {});
    CheckMove(MakeNode("Unsqueeze", 2, 1), {x, i64({0})}, {1});
    CheckMove(MakeNode("Squeeze", 2, 1), {Narrow(RandomTensor({3, 1, 4}, rng), dt), i64({1})},
              {1});
    CheckMove(MakeNode("Identity", 1, 1), {x}, {});
    CheckMove(MakeNode("Dropout", 1, 1), {x}, {});
    CheckMove(MakeNode("Transpose", 1, 1, {{"perm", IntsAttr({0, 3, 1, 2})}}), {x}, {});
    CheckMove(MakeNode("Concat", 2, 1, {{"axis", IntAttr(1)}}), {x, y}, {});
    CheckMove(MakeNode("Split", 2, 2, {{"axis", IntAttr(1)}}), {y, i64({1, 3})}, {1});
    CheckMove(MakeNode("Slice", 4, 1), {x, i64({1, 0}), i64({3, 7}), i64({1, 3})}, {1, 2, 3});
    CheckMove(MakeNode("Gather", 2, 1, {{"axis", IntAttr(2)}}), {x, i64({4, 0, 0, 2})}, {});
    CheckMove(MakeNode("GatherElements", 2, 1, {{"axis", IntAttr(0)}}),
              {Narrow(RandomTensor({3, 4}, rng), dt),
               MakeTensor<int64_t>({2, 4}, {0, 1, 2, 0, 2, 2, 1, 0})},
              {});
    CheckMove(MakeNode("Expand", 2, 1), {Narrow(RandomTensor({3, 1}, rng), dt), i64({2, 3, 4})},
              {1});
    CheckMove(MakeNode("Tile", 2, 1), {Narrow(RandomTensor({2, 3}, rng), dt), i64({2, 3})}, {1});
    CheckMove(MakeNode("Pad", 3, 1),
              {x, i64({0, 0, 1, 2, 0, 1, 0, 0}), Narrow(MakeTensor<float>({}, {1.5f}), dt)},
              {1});
    CheckMove(MakeNode("Pad", 2, 1, {{"mode", StrAttr("reflect")}}),
              {x, i64({0, 0, 1, 2, 0, 0, 2, 1})}, {1});
    Tensor cond = RandomOf(DType::kBool, {5, 7}, rng);
    CheckMove(MakeNode("Where", 3, 1), {cond, x, Narrow(RandomTensor({3, 1, 7}, rng), dt)}, {});
  }
}

}  // namespace
}  // namespace testing
}  // namespace kaiwu
