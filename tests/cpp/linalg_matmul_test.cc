// Gemm and MatMul against float64 references.
#include <gtest/gtest.h>

#include <random>

#include "linalg_test_util.h"

namespace kaiwu {
namespace {

using testing::ExpectNear;
using testing::IntAttr;
using testing::FloatAttr;
using testing::MakeNode;
using testing::RandomTensor;
using testing::RunNode;

TEST(LinalgGemm, AllTransposesAndBiasForms) {
  std::mt19937 rng(1);
  const int64_t m = 37, n = 29, k = 19;
  std::vector<Shape> c_shapes = {{}, {}, {n}, {m, 1}, {1, n}, {m, n}, {1}};
  for (int threads : {1, 3})
    for (int mode = 0; mode < 4; ++mode)
      for (size_t ci = 0; ci < c_shapes.size(); ++ci) {
        bool ta = mode & 1, tb = mode & 2, has_c = ci != 0;
        float alpha = 0.75f, beta = ci == 6 ? 0.f : -1.5f;
        Node node = MakeNode("Gemm", has_c ? 3 : 2, 1,
                             {{"transA", IntAttr(ta)}, {"transB", IntAttr(tb)},
                              {"alpha", FloatAttr(alpha)}, {"beta", FloatAttr(beta)}});
        Tensor a = RandomTensor(ta ? Shape{k, m} : Shape{m, k}, rng);
        Tensor b = RandomTensor(tb ? Shape{n, k} : Shape{k, n}, rng);
        Tensor c = RandomTensor(c_shapes[ci], rng);
        std::vector<Tensor> ins = {a, b};
        if (has_c) ins.push_back(c);
        Tensor y = RunNode(node, ins, threads)[0];
        const Shape& cs = c.shape();
        std::vector<double> want(m * n);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double acc = 0;
            for (int64_t p = 0; p < k; ++p)
              acc += double(a.As<float>()[ta ? p * m + i : i * k + p]) *
                     b.As<float>()[tb ? j * k + p : p * n + j];
            double cv = 0;
            if (has_c) {
              int64_t ri = cs.size() == 2 && cs[0] != 1 ? i : 0;
              int64_t cj = !cs.empty() && cs.back() != 1 ? j : 0;
              cv = c.As<float>()[ri * (cs.empty() ? 1 : cs.back()) + cj];
            }
            want[i * n + j] = alpha * acc + beta * cv;
          }
        ExpectNear(y, {m, n}, want, "gemm mode " + std::to_string(mode) + " c " + std::to_string(ci));
      }
}

TEST(LinalgGemm, Int64Gemm) {
  Node node = MakeNode("Gemm", 3, 1, {{"transB", IntAttr(1)}});
  Tensor a = testing::MakeTensor<int64_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = testing::MakeTensor<int64_t>({2, 3}, {1, 0, -1, 2, 1, 0});
  Tensor c = testing::MakeTensor<int64_t>({2}, {10, 20});
  Tensor y = RunNode(node, {a, b, c})[0];
  std::vector<int64_t> want = {10 - 2, 20 + 4, 10 - 2, 20 + 13};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y.As<int64_t>()[i], want[i]);
}

TEST(LinalgGemm, RejectsBadShapes) {
  std::mt19937 rng(2);
  Node node = MakeNode("Gemm", 3, 1);
  EXPECT_THROW(RunNode(node, {RandomTensor({3, 4}, rng), RandomTensor({5, 6}, rng),
                              RandomTensor({6}, rng)}),
               Error);
  EXPECT_THROW(RunNode(node, {RandomTensor({3, 4}, rng), RandomTensor({4, 6}, rng),
                              RandomTensor({2, 6}, rng)}),
               Error);
  EXPECT_THROW(RunNode(MakeNode("Gemm", 2, 1), {RandomTensor({3, 4, 1}, rng),
                                                RandomTensor({4, 6}, rng)}),
               Error);
}

// Naive numpy matmul in float64.
std::vector<double> RefMatMul(const Tensor& a, const Tensor& b, Shape* out_shape) {
  Shape as = a.shape(), bs = b.shape();
  bool av = as.size() == 1, bv = bs.size() == 1;
  if (av) as.insert(as.begin(), 1);
  if (bv) bs.push_back(1);
  int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  size_t r = std::max(ab.size(), bb.size());
  while (ab.size() < r) ab.insert(ab.begin(), 1);
  while (bb.size() < r) bb.insert(bb.begin(), 1);
  Shape batch(r);
  for (size_t d = 0; d < r; ++d) batch[d] = std::max(ab[d], bb[d]);
  *out_shape = batch;
  if (!av) out_shape->push_back(m);
  if (!bv) out_shape->push_back(n);
  int64_t nb = NumElements(batch);
  std::vector<double> out(nb * m * n);
  for (int64_t bi = 0; bi < nb; ++bi) {
    int64_t rem = bi, oa = 0, ob = 0, sa = 1, sb = 1;
    for (int d = int(r) - 1; d >= 0; --d) {
      int64_t idx = rem % batch[d];
      rem /= batch[d];
      oa += (ab[d] == 1 ? 0 : idx) * sa;
      ob += (bb[d] == 1 ? 0 : idx) * sb;
      sa *= ab[d];
      sb *= bb[d];
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p)
          acc += double(a.As<float>()[oa * m * k + i * k + p]) * b.As<float>()[ob * k * n + p * n + j];
        out[bi * m * n + i * n + j] = acc;
      }
  }
  return out;
}

TEST(LinalgMatMul, NumpySemantics) {
  std::mt19937 rng(3);
  std::vector<std::pair<Shape, Shape>> cases = {
      {{7}, {7}},          {{7}, {7, 5}},          {{4, 7}, {7}},
      {{3, 4, 7}, {7}},    {{7}, {2, 7, 5}},       {{6, 9}, {9, 11}},
      {{2, 3, 40, 9}, {9, 33}},  {{2, 1, 4, 7}, {3, 7, 5}}, {{4, 7}, {2, 3, 7, 5}},
      {{5, 4, 7}, {5, 7, 6}},    {{1, 4, 7}, {5, 7, 6}},    {{8, 1, 3}, {1, 3, 1}},
      {{3, 0, 7}, {7, 5}},       {{3, 4, 0}, {0, 5}}};
  for (int threads : {1, 3})
    for (const auto& [sa, sb] : cases) {
      Tensor a = RandomTensor(sa, rng), b = RandomTensor(sb, rng);
      Shape want_shape;
      std::vector<double> want = RefMatMul(a, b, &want_shape);
      Tensor y = RunNode(MakeNode("MatMul", 2, 1), {a, b}, threads)[0];
      ExpectNear(y, want_shape, want, ShapeToString(sa) + " x " + ShapeToString(sb));
    }
}

TEST(LinalgMatMul, Int32Broadcast) {
  Tensor a = testing::MakeTensor<int32_t>({2, 1, 2}, {1, 2, 3, 4});
  Tensor b = testing::MakeTensor<int32_t>({2, 2}, {1, 1, 0, 2});
  Tensor y = RunNode(MakeNode("MatMul", 2, 1), {a, b})[0];
  ASSERT_EQ(ShapeToString(y.shape()), ShapeToString({2, 1, 2}));
  std::vector<int32_t> want = {1, 5, 3, 11};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y.As<int32_t>()[i], want[i]);
}

TEST(LinalgMatMul, RejectsMismatch) {
  std::mt19937 rng(4);
  EXPECT_THROW(RunNode(MakeNode("MatMul", 2, 1), {RandomTensor({3, 4}, rng), RandomTensor({5, 2}, rng)}),
               Error);
  EXPECT_THROW(RunNode(MakeNode("MatMul", 2, 1),
                       {RandomTensor({2, 3, 4}, rng), RandomTensor({3, 4, 2}, rng)}),
               Error);
  EXPECT_THROW(RunNode(MakeNode("MatMul", 2, 1), {RandomTensor({4}, rng),
                                                  testing::MakeTensor<int32_t>({4}, {1, 2, 3, 4})}),
               Error);
}

}  // namespace
}  // namespace kaiwu
