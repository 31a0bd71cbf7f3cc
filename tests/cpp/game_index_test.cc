// GatherND, ScatterND, ScatterElements and OneHot against naive references, and
// their index checks: an out-of-range index is a kRuntime error naming the node.
#include <gtest/gtest.h>

#include <random>

#include "kernel_harness.h"

namespace kaiwu {
namespace {

using testing::IntAttr;
using testing::MakeNode;
using testing::MakeTensor;
using testing::RandomTensor;
using testing::RunNode;
using testing::StrAttr;

std::vector<int64_t> Strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int d = static_cast<int>(s.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * s[d + 1];
  return st;
}

void ExpectRuntimeError(const Node& node, const std::vector<Tensor>& ins) {
  try {
    RunNode(node, ins);
    ADD_FAILURE() << node.op_type << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kRuntime) << e.what();
    EXPECT_NE(std::string(e.what()).find("_under_test"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
}

TEST(GameIndex, GatherNDWithBatchDims) {
  std::mt19937 rng(1);
  // data [2, 3, 4, 5], batch_dims 1, indices [2, 6, 2] -> out [2, 6, 5]
  Tensor x = RandomTensor({2, 3, 4, 5}, rng);
  std::vector<int64_t> idx(24);
  for (int i = 0; i < 12; ++i) {
    idx[2 * i] = static_cast<int64_t>(rng() % 6) - 3;      // in [-3, 2]
    idx[2 * i + 1] = static_cast<int64_t>(rng() % 8) - 4;  // in [-4, 3]
  }
  Node node = MakeNode("GatherND", 2, 1, {{"batch_dims", IntAttr(1)}});
  for (int threads : {1, 3}) {
    Tensor y = RunNode(node, {x, MakeTensor<int64_t>({2, 6, 2}, idx)}, threads)[0];
    ASSERT_EQ(ShapeToString(y.shape()), "(2, 6, 5)");
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < 6; ++i) {
        int64_t i0 = idx[(b * 6 + i) * 2], i1 = idx[(b * 6 + i) * 2 + 1];
        i0 += i0 < 0 ? 3 : 0;
        i1 += i1 < 0 ? 4 : 0;
        for (int j = 0; j < 5; ++j)
          ASSERT_EQ(y.As<float>()[(b * 6 + i) * 5 + j],
                    x.As<float>()[((b * 3 + i0) * 4 + i1) * 5 + j]);
      }
  }
  ExpectRuntimeError(MakeNode("GatherND", 2, 1), {x, MakeTensor<int64_t>({1, 2}, {1, 3})});
  ExpectRuntimeError(MakeNode("GatherND", 2, 1), {x, MakeTensor<int32_t>({1, 1}, {-3})});
}

TEST(GameIndex, ScatterNDReductions) {
  std::mt19937 rng(2);
  Tensor x = RandomTensor({4, 3, 2}, rng);
  Tensor upd = RandomTensor({3, 2}, rng);
  // k = 2; index (1, 2) twice, and (3, -1) = (3, 2) once more.
  std::vector<int64_t> idx = {1, 2, 0, 0, 1, -1};
  for (const char* red : {"none", "add", "mul", "max", "min"}) {
    std::vector<float> want(x.As<float>(), x.As<float>() + x.size());
    const std::string r = red;
    std::vector<int64_t> used = r == "none" ? std::vector<int64_t>{1, 2, 0, 0, 3, 1}
                                            : idx;
    for (int i = 0; i < 3; ++i) {
      int64_t a = used[2 * i], b = used[2 * i + 1] < 0 ? used[2 * i + 1] + 3 : used[2 * i + 1];
      for (int j = 0; j < 2; ++j) {
        float& d = want[(a * 3 + b) * 2 + j];
        float u = upd.As<float>()[i * 2 + j];
        d = r == "none" ? u : r == "add" ? d + u : r == "mul" ? d * u : r == "max" ? std::max(d, u)
                                                                                  : std::min(d, u);
      }
    }
    Node node = MakeNode("ScatterND", 3, 1, {{"reduction", StrAttr(red)}});
    Tensor y = RunNode(node, {x, MakeTensor<int64_t>({3, 2}, used), upd}, 2)[0];
    for (int64_t i = 0; i < y.size(); ++i) ASSERT_FLOAT_EQ(y.As<float>()[i], want[i]) << red << i;
  }
  ExpectRuntimeError(MakeNode("ScatterND", 3, 1),
                     {x, MakeTensor<int64_t>({3, 2}, {0, 0, 4, 0, 1, 1}), upd});
}

TEST(GameIndex, ScatterElementsEveryAxis) {
  std::mt19937 rng(3);
  Shape ds = {3, 4, 5}, is = {2, 3, 4};
  Tensor x = RandomTensor(ds, rng);
  Tensor upd = RandomTensor(is, rng);
  for (int axis = 0; axis < 3; ++axis)
    for (const char* red : {"add", "max"}) {
      std::vector<int64_t> idx(24);
      for (auto& v : idx) v = static_cast<int64_t>(rng() % (2 * ds[axis])) - ds[axis];
      std::vector<float> want(x.As<float>(), x.As<float>() + x.size());
      auto dst = Strides(ds), ist = Strides(is);
      for (int64_t p = 0; p < 24; ++p) {
        int64_t off = 0;
        for (int d = 0; d < 3; ++d) {
          int64_t c = p / ist[d] % is[d];
          if (d == axis) c = idx[p] < 0 ? idx[p] + ds[axis] : idx[p];
          off += c * dst[d];
        }
        float u = upd.As<float>()[p];
        want[off] = std::string(red) == "add" ? want[off] + u : std::max(want[off], u);
      }
      Node node = MakeNode("ScatterElements", 3, 1,
                           {{"axis", IntAttr(axis)}, {"reduction", StrAttr(red)}});
      for (int threads : {1, 3}) {
        Tensor y = RunNode(node, {x, MakeTensor<int64_t>(is, idx), upd}, threads)[0];
        for (int64_t i = 0; i < y.size(); ++i)
          ASSERT_NEAR(y.As<float>()[i], want[i], 1e-5) << axis << red << i;
      }
    }
  std::vector<int64_t> bad(24, 0);
  bad[17] = 5;  // axis 2 has size 5
  ExpectRuntimeError(MakeNode("ScatterElements", 3, 1, {{"axis", IntAttr(2)}}),
                     {x, MakeTensor<int64_t>(is, bad), upd});
}

TEST(GameIndex, OneHotAxesAndOutOfRange) {
  // indices [2, 3], depth 4; an index outside [-4, 3] gives an all-off row (ONNX spec).
  std::vector<int64_t> idx = {0, 3, -1, 2, 7, -5};
  for (int axis : {-1, 0, 1}) {
    Node node = MakeNode("OneHot", 3, 1, {{"axis", IntAttr(axis)}});
    Tensor y = RunNode(node, {MakeTensor<int64_t>({2, 3}, idx), MakeTensor<float>({}, {4.f}),
                              MakeTensor<float>({2}, {-1.f, 2.f})})[0];
    const int a = axis < 0 ? 2 : axis;
    Shape want_shape = {2, 3};
    want_shape.insert(want_shape.begin() + a, 4);
    ASSERT_EQ(ShapeToString(y.shape()), ShapeToString(want_shape));
    auto st = Strides(want_shape);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k) {
          int64_t v = idx[i * 3 + j];
          v += v < 0 ? 4 : 0;
          int64_t c[3] = {i, j, 0};
          int64_t full[3];
          for (int d = 0, s = 0; d < 3; ++d) full[d] = d == a ? k : c[s++];
          float got = y.As<float>()[full[0] * st[0] + full[1] * st[1] + full[2] * st[2]];
          ASSERT_EQ(got, v == k ? 2.f : -1.f) << axis << " " << i << j << k;
        }
  }
}

}  // namespace
}  // namespace kaiwu
