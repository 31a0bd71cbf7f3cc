// Concat and Split against naive index-mapping references.
#include <gtest/gtest.h>

#include <random>

#include "tensor_ops_test_util.h"

namespace kaiwu {
namespace {

using testing::AsDouble;
using testing::ExpectError;
using testing::ExpectTensor;
using testing::Ints;
using testing::IntAttr;
using testing::IntsAttr;
using testing::MakeNode;
using testing::RandomOf;
using testing::RandomShape;
using testing::Ravel;
using testing::RunNode;
using testing::Unravel;

// Output element at idx comes from the input whose range along axis holds idx[axis].
std::vector<double> ConcatRef(const std::vector<Tensor>& ins, int axis, const Shape& out) {
  std::vector<double> want(NumElements(out));
  std::vector<std::vector<double>> data;
  for (const Tensor& t : ins) data.push_back(AsDouble(t));
  for (int64_t f = 0; f < static_cast<int64_t>(want.size()); ++f) {
    std::vector<int64_t> idx = Unravel(f, out);
    for (size_t i = 0; i < ins.size(); ++i) {
      if (idx[axis] < ins[i].shape()[axis]) {
        want[f] = data[i][Ravel(idx, ins[i].shape())];
        break;
      }
      idx[axis] -= ins[i].shape()[axis];
    }
  }
  return want;
}

TEST(TensorOpsConcat, MatchesReference) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 30; ++trial) {
    Shape base = RandomShape(rng, 1, 4, 4);
    int rank = static_cast<int>(base.size());
    int axis = std::uniform_int_distribution<int>(0, rank - 1)(rng);
    int n = std::uniform_int_distribution<int>(1, 4)(rng);
    DType dt = trial % 3 == 0 ? DType::kInt64 : (trial % 3 == 1 ? DType::kFloat32 : DType::kUInt8);
    std::vector<Tensor> ins;
    Shape out = base;
    out[axis] = 0;
    for (int i = 0; i < n; ++i) {
      Shape s = base;
      s[axis] = std::uniform_int_distribution<int>(0, 3)(rng);  // zero-sized parts too
      out[axis] += s[axis];
      ins.push_back(RandomOf(dt, s, rng));
    }
    int attr_axis = trial % 2 ? axis - rank : axis;
    std::vector<double> want = ConcatRef(ins, axis, out);
    for (int threads : {1, 3}) {
      Node node = MakeNode("Concat", n, 1, {{"axis", IntAttr(attr_axis)}});
      ExpectTensor(RunNode(node, ins, threads)[0], out, want, "concat");
    }
  }
  // Large enough to split across threads: batch rows of [obs | hidden].
  std::vector<Tensor> ins = {RandomOf(DType::kFloat32, {512, 37}, rng),
                             RandomOf(DType::kFloat32, {512, 64}, rng)};
  std::vector<double> want = ConcatRef(ins, 1, {512, 101});
  for (int threads : {1, 3})
    ExpectTensor(RunNode(MakeNode("Concat", 2, 1, {{"axis", IntAttr(-1)}}), ins, threads)[0],
                 {512, 101}, want, "concat large");
}

TEST(TensorOpsConcat, Errors) {
  std::mt19937 rng(12);
  Tensor a = RandomOf(DType::kFloat32, {2, 3}, rng), b = RandomOf(DType::kFloat32, {3, 3}, rng);
  Tensor c = RandomOf(DType::kInt64, {2, 3}, rng);
  Node n1 = MakeNode("Concat", 2, 1, {{"axis", IntAttr(1)}});
  ExpectError([&] { RunNode(n1, {a, b}); }, StatusCode::kModel, "shape mismatch");
  ExpectError([&] { RunNode(n1, {a, c}); }, StatusCode::kModel, "dtype mismatch");
  ExpectError([&] { RunNode(MakeNode("Concat", 2, 1, {{"axis", IntAttr(2)}}), {a, a}); },
              StatusCode::kModel, "axis");
}

// Splits `x` along axis into `sizes` parts and checks every output.
void CheckSplit(const Node& node, const std::vector<Tensor>& inputs, int axis,
                const std::vector<int64_t>& sizes) {
  const Tensor& x = inputs[0];
  std::vector<double> xs = AsDouble(x);
  for (int threads : {1, 3}) {
    std::vector<Tensor> outs = RunNode(node, inputs, threads);
    ASSERT_EQ(outs.size(), sizes.size());
    int64_t begin = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      Shape s = x.shape();
      s[axis] = sizes[k];
      std::vector<double> want(NumElements(s));
      for (int64_t f = 0; f < static_cast<int64_t>(want.size()); ++f) {
        std::vector<int64_t> idx = Unravel(f, s);
        idx[axis] += begin;
        want[f] = xs[Ravel(idx, x.shape())];
      }
      ExpectTensor(outs[k], s, want, "split output " + std::to_string(k));
      begin += sizes[k];
    }
  }
}

TEST(TensorOpsSplit, MatchesReference) {
  std::mt19937 rng(13);
  Tensor x = RandomOf(DType::kFloat32, {4, 7, 3}, rng);
  // Uneven sizes from input 1, negative axis.
  CheckSplit(MakeNode("Split", 2, 3, {{"axis", IntAttr(-2)}}), {x, Ints({2, 0, 5})}, 1, {2, 0, 5});
  // Equal split on axis 0, and on the last axis.
  CheckSplit(MakeNode("Split", 1, 2), {x}, 0, {2, 2});
  CheckSplit(MakeNode("Split", 1, 3, {{"axis", IntAttr(2)}}), {x}, 2, {1, 1, 1});
  // num_outputs (opset 18): 7 into 3 gives 3, 3, 1.
  CheckSplit(MakeNode("Split", 1, 3, {{"axis", IntAttr(1)}, {"num_outputs", IntAttr(3)}}), {x},
             1, {3, 3, 1});
  // Attribute form (opset 11).
  Node old = MakeNode("Split", 1, 2, {{"axis", IntAttr(1)}, {"split", IntsAttr({6, 1})}});
  old.opset = 11;
  CheckSplit(old, {x}, 1, {6, 1});
  // Large: split a batch of fused gate pre-activations.
  Tensor big = RandomOf(DType::kInt32, {600, 96}, rng);
  CheckSplit(MakeNode("Split", 2, 3, {{"axis", IntAttr(1)}}), {big, Ints({32, 32, 32})}, 1,
             {32, 32, 32});
  CheckSplit(MakeNode("Split", 2, 2), {big, Ints({100, 500})}, 0, {100, 500});
}

TEST(TensorOpsSplit, Errors) {
  std::mt19937 rng(14);
  Tensor x = RandomOf(DType::kFloat32, {4, 7}, rng);
  ExpectError([&] { RunNode(MakeNode("Split", 2, 2, {{"axis", IntAttr(1)}}), {x, Ints({3, 3})}); },
              StatusCode::kModel, "sizes do not sum");
  ExpectError([&] { RunNode(MakeNode("Split", 2, 2), {x, Ints({4})}); }, StatusCode::kModel,
              "wrong count");
  ExpectError([&] { RunNode(MakeNode("Split", 1, 2, {{"axis", IntAttr(1)}}), {x}); },
              StatusCode::kModel, "7 into 2 equal parts");
  ExpectError([&] {
    RunNode(MakeNode("Split", 1, 2, {{"axis", IntAttr(1)}, {"num_outputs", IntAttr(3)}}), {x});
  }, StatusCode::kModel, "num_outputs mismatch");
}

}  // namespace
}  // namespace kaiwu
