// Gather, GatherElements and Pad against naive references.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "tensor_ops_test_util.h"

namespace kaiwu {
namespace {

using testing::AsDouble;
using testing::ExpectError;
using testing::ExpectTensor;
using testing::Ints;
using testing::IntAttr;
using testing::MakeNode;
using testing::MakeTensor;
using testing::RandomOf;
using testing::RandomShape;
using testing::Ravel;
using testing::RunNode;
using testing::StrAttr;
using testing::Unravel;

// Random indices in [-dim, dim) of int64 or int32.
Tensor RandomIndices(const Shape& shape, int64_t dim, bool i64, std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> dist(-dim, dim - 1);
  std::vector<int64_t> v(NumElements(shape));
  for (auto& x : v) x = dist(rng);
  if (i64) return MakeTensor<int64_t>(shape, v);
  return MakeTensor<int32_t>(shape, std::vector<int32_t>(v.begin(), v.end()));
}

void CheckGather(const Tensor& x, const Tensor& ind, int64_t axis) {
  const int64_t rank = static_cast<int64_t>(x.shape().size());
  const int64_t a = axis < 0 ? axis + rank : axis;
  Shape out(x.shape().begin(), x.shape().begin() + a);
  out.insert(out.end(), ind.shape().begin(), ind.shape().end());
  out.insert(out.end(), x.shape().begin() + a + 1, x.shape().end());
  std::vector<double> xs = AsDouble(x), is = AsDouble(ind), want(NumElements(out));
  const size_t q = ind.shape().size();
  for (int64_t f = 0; f < static_cast<int64_t>(want.size()); ++f) {
    std::vector<int64_t> o = Unravel(f, out), i;
    i.insert(i.end(), o.begin(), o.begin() + a);
    int64_t k = static_cast<int64_t>(is[Ravel({o.begin() + a, o.begin() + a + q}, ind.shape())]);
    i.push_back(k < 0 ? k + x.shape()[a] : k);
    i.insert(i.end(), o.begin() + a + q, o.end());
    want[f] = xs[Ravel(i, x.shape())];
  }
  for (int threads : {1, 3})
    ExpectTensor(RunNode(MakeNode("Gather", 2, 1, {{"axis", IntAttr(axis)}}), {x, ind}, threads)[0],
                 out, want, "gather " + ShapeToString(x.shape()) + " axis " + std::to_string(axis));
}

TEST(TensorOpsGather, MatchesReference) {
  std::mt19937 rng(31);
  const DType dtypes[] = {DType::kFloat32, DType::kInt64, DType::kBool, DType::kInt16};
  for (int trial = 0; trial < 30; ++trial) {
    Tensor x = RandomOf(dtypes[trial % 4], RandomShape(rng, 1, 4, 5), rng);
    const int64_t rank = static_cast<int64_t>(x.shape().size());
    int64_t axis = std::uniform_int_distribution<int64_t>(-rank, rank - 1)(rng);
    int64_t dim = x.shape()[axis < 0 ? axis + rank : axis];
    CheckGather(x, RandomIndices(RandomShape(rng, 0, 2, 4), dim, trial % 2, rng), axis);
  }
  // Embedding lookup (axis 0, whole rows), large enough to split.
  Tensor table = RandomOf(DType::kFloat32, {50, 64}, rng);
  CheckGather(table, RandomIndices({32, 20}, 50, true, rng), 0);
  // Axis 1 with negative indices, int32.
  Tensor y = RandomOf(DType::kFloat32, {3, 6, 4}, rng);
  CheckGather(y, MakeTensor<int32_t>({2, 2}, {-1, 0, -6, 5}), 1);
  // A scalar index drops the axis; a 1-D gather uses element copies.
  CheckGather(y, MakeTensor<int64_t>({}, {-2}), 1);
  CheckGather(RandomOf(DType::kFloat32, {1000}, rng), RandomIndices({4000}, 1000, true, rng), 0);
  CheckGather(RandomOf(DType::kInt64, {400, 50}, rng), RandomIndices({30}, 50, false, rng), -1);
}

TEST(TensorOpsGather, OutOfRangeIndexThrowsRuntime) {
  std::mt19937 rng(32);
  Tensor x = RandomOf(DType::kFloat32, {3, 6}, rng);
  for (int64_t bad : {6, -7, 1000}) {
    Tensor ind = MakeTensor<int64_t>({3}, {0, bad, 1});
    try {
      RunNode(MakeNode("Gather", 2, 1, {{"axis", IntAttr(1)}}), {x, ind}, 3);
      ADD_FAILURE() << "index " << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kRuntime);
      std::string msg = e.what();
      EXPECT_NE(msg.find("Gather_under_test"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::to_string(bad)), std::string::npos) << msg;
    }
  }
  ExpectError([&] { RunNode(MakeNode("Gather", 2, 1), {x, MakeTensor<float>({1}, {0.f})}); },
              StatusCode::kModel, "float indices");
  ExpectError([&] { RunNode(MakeNode("Gather", 2, 1, {{"axis", IntAttr(2)}}), {x, Ints({0})}); },
              StatusCode::kModel, "bad axis");
}

TEST(TensorOpsGatherElements, MatchesReference) {
  std::mt19937 rng(33);
  for (int trial = 0; trial < 30; ++trial) {
    DType dt = trial % 2 ? DType::kFloat32 : DType::kUInt8;
    Tensor x = RandomOf(dt, RandomShape(rng, 1, 4, 5), rng);
    const int64_t rank = static_cast<int64_t>(x.shape().size());
    int64_t axis = std::uniform_int_distribution<int64_t>(-rank, rank - 1)(rng);
    int64_t a = axis < 0 ? axis + rank : axis;
    Shape is = x.shape();  // indices may be smaller than data off the axis
    for (int64_t d = 0; d < rank; ++d)
      is[d] = d == a ? std::uniform_int_distribution<int64_t>(1, 6)(rng)
                     : std::uniform_int_distribution<int64_t>(1, x.shape()[d])(rng);
    if (trial == 0) {  // large enough to split across threads
      x = RandomOf(DType::kFloat32, {300, 80}, rng);
      is = {200, 80};
      axis = a = 0;
    }
    Tensor ind = RandomIndices(is, x.shape()[a], trial % 3 != 0, rng);
    std::vector<double> xs = AsDouble(x), ids = AsDouble(ind), want(ind.size());
    for (int64_t f = 0; f < ind.size(); ++f) {
      std::vector<int64_t> i = Unravel(f, is);
      int64_t k = static_cast<int64_t>(ids[f]);
      i[a] = k < 0 ? k + x.shape()[a] : k;
      want[f] = xs[Ravel(i, x.shape())];
    }
    for (int threads : {1, 3})
      ExpectTensor(RunNode(MakeNode("GatherElements", 2, 1, {{"axis", IntAttr(axis)}}), {x, ind},
                           threads)[0],
                   is, want, "gather_elements trial " + std::to_string(trial));
  }
  Tensor x = RandomOf(DType::kFloat32, {3, 4}, rng);
  Node n = MakeNode("GatherElements", 2, 1, {{"axis", IntAttr(1)}});
  ExpectError([&] { RunNode(n, {x, MakeTensor<int64_t>({1, 2}, {0, 4})}); }, StatusCode::kRuntime,
              "out of range");
  ExpectError([&] { RunNode(n, {x, MakeTensor<int64_t>({2}, {0, 1})}); }, StatusCode::kModel,
              "rank mismatch");
}

// numpy.pad semantics for one coordinate; -1 means the constant.
int64_t PadSource(int64_t i, int64_t dim, const std::string& mode) {
  if (i >= 0 && i < dim) return i;
  if (mode == "constant") return -1;
  if (mode == "edge") return i < 0 ? 0 : dim - 1;
  if (mode == "wrap") return ((i % dim) + dim) % dim;
  if (dim == 1) return 0;
  while (i < 0 || i >= dim) i = i < 0 ? -i : 2 * (dim - 1) - i;  // reflect, repeatedly
  return i;
}

void CheckPad(const Tensor& x, const std::string& mode, const std::vector<int64_t>& pads,
              const std::vector<int64_t>& axes, const Tensor* value) {
  const int rank = static_cast<int>(x.shape().size());
  std::vector<int64_t> begin(rank, 0), end(rank, 0);
  for (size_t k = 0; k < axes.size(); ++k) {
    int64_t a = axes[k] < 0 ? axes[k] + rank : axes[k];
    begin[a] = pads[k];
    end[a] = pads[k + axes.size()];
  }
  Shape out(rank);
  for (int d = 0; d < rank; ++d) out[d] = x.shape()[d] + begin[d] + end[d];
  double cv = value ? AsDouble(*value)[0] : 0.0;
  std::vector<double> xs = AsDouble(x), want(NumElements(out));
  for (int64_t f = 0; f < static_cast<int64_t>(want.size()); ++f) {
    std::vector<int64_t> o = Unravel(f, out), i(rank);
    bool inside = true;
    for (int d = 0; d < rank && inside; ++d) {
      i[d] = PadSource(o[d] - begin[d], x.shape()[d], mode);
      inside = i[d] >= 0;
    }
    want[f] = inside ? xs[Ravel(i, x.shape())] : cv;
  }
  std::vector<Tensor> inputs = {x, Ints(pads), value ? *value : Tensor(), Ints(axes)};
  for (int threads : {1, 3})
    ExpectTensor(RunNode(MakeNode("Pad", 4, 1, {{"mode", StrAttr(mode)}}), inputs, threads)[0], out,
                 want, "pad " + mode + " " + ShapeToString(x.shape()) + " " + ShapeToString(pads));
}

TEST(TensorOpsPad, MatchesReference) {
  std::mt19937 rng(34);
  for (const std::string mode : {"constant", "reflect", "edge", "wrap"}) {
    for (int trial = 0; trial < 12; ++trial) {
      DType dt = trial % 2 ? DType::kFloat32 : DType::kInt32;
      Tensor x = RandomOf(dt, RandomShape(rng, 1, 3, 5), rng);
      const int rank = static_cast<int>(x.shape().size());
      std::vector<int64_t> axes, pads(2 * rank);
      for (int d = 0; d < rank; ++d) axes.push_back(trial % 3 == 0 ? d - rank : d);
      for (int k = 0; k < 2 * rank; ++k) {
        int64_t dim = x.shape()[axes[k % rank] < 0 ? axes[k % rank] + rank : axes[k % rank]];
        int64_t lo = mode == "constant" ? -(dim - 1) / 2 : 0;  // negative pads crop
        int64_t hi = mode == "reflect" ? dim + 2 : 4;           // reflect past one period too
        pads[k] = std::uniform_int_distribution<int64_t>(lo, hi)(rng);
      }
      Tensor value = x.dtype() == DType::kFloat32 ? MakeTensor<float>({}, {1.5f})
                                                  : MakeTensor<int32_t>({}, {-9});
      CheckPad(x, mode, pads, axes, trial % 2 ? &value : nullptr);
    }
  }
  // Only some axes (opset 18 axes input); a large padded batch that splits.
  Tensor x = RandomOf(DType::kFloat32, {2, 3, 40, 50}, rng);
  Tensor value = MakeTensor<float>({1}, {-0.25f});
  CheckPad(x, "constant", {1, 2, 3, 0}, {-2, 3}, &value);
  CheckPad(x, "reflect", {2, 3, 1, 4}, {2, 3}, nullptr);
  CheckPad(x, "edge", {1, 0, 0, 5}, {0, 3}, nullptr);
  // Attribute form (opset 2): pads and value attributes.
  Tensor y = RandomOf(DType::kFloat32, {2, 3}, rng);
  Node old = MakeNode("Pad", 1, 1, {{"pads", testing::IntsAttr({0, 1, 1, 0})},
                                    {"value", testing::FloatAttr(4.f)}});
  old.opset = 2;
  std::vector<double> ys = AsDouble(y), want;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) want.push_back(i < 2 && j >= 1 ? ys[i * 3 + j - 1] : 4.0);
  ExpectTensor(RunNode(old, {y})[0], {3, 4}, want, "pad attribute form");
}

TEST(TensorOpsPad, Errors) {
  std::mt19937 rng(35);
  Tensor x = RandomOf(DType::kFloat32, {3, 4}, rng);
  Node mirror = MakeNode("Pad", 2, 1, {{"mode", StrAttr("mirror")}});
  ExpectError([&] { RunNode(mirror, {x, Ints({0, 0, 0, 0})}); }, StatusCode::kModel, "bad mode");
  ExpectError([&] { RunNode(MakeNode("Pad", 2, 1), {x, Ints({1, 1})}); }, StatusCode::kModel,
              "pads length");
  ExpectError([&] { RunNode(MakeNode("Pad", 2, 1), {x, Ints({-4, 0, 0, 0})}); }, StatusCode::kModel,
              "crop past zero");
  ExpectError([&] { RunNode(MakeNode("Pad", 3, 1), {x, Ints({1, 1, 1, 1}), Ints({1})}); },
              StatusCode::kModel, "constant dtype");
}

}  // namespace
}  // namespace kaiwu
