// TopK and CumSum against naive references.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "kernel_harness.h"

namespace kaiwu {
namespace {

using testing::IntAttr;
using testing::MakeNode;
using testing::MakeTensor;
using testing::RunNode;

TEST(GameTopK, TiesTakeTheLowerIndexFirst) {
  std::mt19937 rng(4);
  Shape shape = {3, 50, 4};  // K up to 32 scans with insertion; larger K sorts pairs
  std::vector<float> x(3 * 50 * 4);
  for (auto& v : x) v = static_cast<float>(rng() % 4);  // many ties
  for (int largest : {1, 0})
    for (int axis : {0, 1, 2})
      for (int64_t k : {int64_t{1}, int64_t{3}, std::min<int64_t>(40, shape[axis]), shape[axis]}) {
        Node node =
            MakeNode("TopK", 2, 2, {{"axis", IntAttr(axis)}, {"largest", IntAttr(largest)}});
        auto out = RunNode(node, {MakeTensor<float>(shape, x), MakeTensor<int64_t>({1}, {k})}, 3);
        Shape os = shape;
        os[axis] = k;
        ASSERT_EQ(ShapeToString(out[1].shape()), ShapeToString(os));
        const int64_t dim = shape[axis];
        int64_t inner = 1;
        for (int d = axis + 1; d < 3; ++d) inner *= shape[d];
        const int64_t outer = x.size() / (dim * inner);
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) {
            std::vector<int64_t> order(dim);
            std::iota(order.begin(), order.end(), 0);
            auto val = [&](int64_t j) { return x[(o * dim + j) * inner + i]; };
            std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
              return largest ? val(a) > val(b) : val(a) < val(b);
            });
            for (int64_t j = 0; j < k; ++j) {
              ASSERT_EQ(out[1].As<int64_t>()[(o * k + j) * inner + i], order[j]);
              ASSERT_EQ(out[0].As<float>()[(o * k + j) * inner + i], val(order[j]));
            }
          }
      }
  Node node = MakeNode("TopK", 2, 2);
  EXPECT_THROW(RunNode(node, {MakeTensor<float>({2, 3}, std::vector<float>(6, 1.f)),
                              MakeTensor<int64_t>({1}, {4})}),
               Error);
}

TEST(GameCumSum, ExclusiveReverseEveryAxis) {
  std::mt19937 rng(5);
  Shape shape = {3, 4, 300};
  std::vector<int64_t> x(3 * 4 * 300);
  for (auto& v : x) v = static_cast<int64_t>(rng() % 21) - 10;
  for (int axis : {0, 1, 2, -1})
    for (int exclusive : {0, 1})
      for (int reverse : {0, 1}) {
        Node node = MakeNode("CumSum", 2, 1,
                             {{"exclusive", IntAttr(exclusive)}, {"reverse", IntAttr(reverse)}});
        Tensor y = RunNode(node, {MakeTensor<int64_t>(shape, x), MakeTensor<int64_t>({}, {axis})},
                           3)[0];
        const int a = (axis + 3) % 3;
        const int64_t dim = shape[a];
        int64_t inner = 1;
        for (int d = a + 1; d < 3; ++d) inner *= shape[d];
        for (int64_t o = 0; o < static_cast<int64_t>(x.size()) / (dim * inner); ++o)
          for (int64_t i = 0; i < inner; ++i)
            for (int64_t j = 0; j < dim; ++j) {
              int64_t want = 0;
              for (int64_t t = 0; t < dim; ++t) {
                bool in = reverse ? (exclusive ? t > j : t >= j) : (exclusive ? t < j : t <= j);
                if (in) want += x[(o * dim + t) * inner + i];
              }
              ASSERT_EQ(y.As<int64_t>()[(o * dim + j) * inner + i], want)
                  << axis << exclusive << reverse;
            }
      }
}

}  // namespace
}  // namespace kaiwu
