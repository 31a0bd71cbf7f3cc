// ComposeView (ops/view_chain.h): every element of the composed view against
// the chain applied op by op to real data (index arithmetic of each op), for
// torch's attention export and for chains one stride cannot address.
#include <gtest/gtest.h>

#include <numeric>

#include "ops/view_chain.h"

namespace kaiwu {
namespace {

// A tensor of int64 values (each element its own position in the base).
struct T {
  Shape shape;
  std::vector<int64_t> v;
};

T Base(const Shape& s) {
  T t{s, std::vector<int64_t>(static_cast<size_t>(NumElements(s)))};
  std::iota(t.v.begin(), t.v.end(), 0);
  return t;
}

std::vector<int64_t> Strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

T Transpose(const T& x, const std::vector<int64_t>& perm) {
  T y;
  for (int64_t p : perm) y.shape.push_back(x.shape[p]);
  y.v.resize(x.v.size());
  const auto xs = Strides(x.shape);
  const auto ys = Strides(y.shape);
  for (int64_t i = 0; i < static_cast<int64_t>(y.v.size()); ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < perm.size(); ++d) off += (i / ys[d] % y.shape[d]) * xs[perm[d]];
    y.v[i] = x.v[off];
  }
  return y;
}

T Gather0(const T& x, int64_t axis, int64_t index) {
  T y;
  for (size_t d = 0; d < x.shape.size(); ++d)
    if (static_cast<int64_t>(d) != axis) y.shape.push_back(x.shape[d]);
  const auto xs = Strides(x.shape);
  const int64_t outer = std::accumulate(x.shape.begin(), x.shape.begin() + axis, int64_t{1}, std::multiplies<>());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < xs[axis]; ++i) y.v.push_back(x.v[o * x.shape[axis] * xs[axis] + index * xs[axis] + i]);
  return y;
}

void ExpectView(const T& want, const Shape& base, const std::vector<int64_t>& recipe,
                const std::vector<std::vector<int64_t>>& targets) {
  StridedView view;
  ASSERT_TRUE(ComposeView(base, recipe, [&](int64_t k) { return targets[k]; }, &view));
  ASSERT_EQ(view.shape, want.shape);
  const auto ws = Strides(want.shape);
  for (int64_t i = 0; i < static_cast<int64_t>(want.v.size()); ++i) {
    int64_t off = view.offset;
    for (size_t d = 0; d < want.shape.size(); ++d) off += (i / ws[d] % want.shape[d]) * view.strides[d];
    ASSERT_EQ(off, want.v[i]) << "element " << i;
  }
}

TEST(ViewChain, TorchAttentionHeads) {
  // [3, L, B, E] -> q = x[1] [L, B, E] -> [L, B*H, d] -> [B*H, L, d] -> [B, H, L, d] (-> K^T [B, H, d, L])
  const int64_t L = 5, B = 3, H = 4, d = 6, E = H * d;
  const Shape base = {3, L, B, E};
  T x = Base(base);
  T q = Gather0(x, 0, 1);
  q.shape = {L, B * H, d};
  q = Transpose(q, {1, 0, 2});
  q.shape = {B, H, L, d};
  const std::vector<int64_t> recipe = {5, 0, 1, 2, 0, 1, 3, 1, 0, 2, 2, 1};
  ExpectView(q, base, recipe, {{L, B * H, d}, {B, H, L, d}});
  T kt = Transpose(q, {0, 1, 3, 2});
  std::vector<int64_t> with_kt = recipe;
  for (int64_t v : {1, 4, 0, 1, 3, 2}) with_kt.push_back(v);
  ExpectView(kt, base, with_kt, {{L, B * H, d}, {B, H, L, d}});
  // 0 and -1 in a target, squeeze / unsqueeze, a negative index and axis
  T u = Gather0(x, 0, 2);
  u.shape = {L, B, 1, E};
  T squeezed = u;
  squeezed.shape = {L, B, E};
  ExpectView(squeezed, base, {5, -4, -1, 4, 1, 2, 3, 1, 2}, {});
  T r = Gather0(x, 0, 0);
  r.shape = {L, B * E};
  ExpectView(r, base, {5, 0, 0, 2, 0}, {{0, -1}});
}

TEST(ViewChain, RefusesWhatOneStrideCannotAddress) {
  StridedView view;
  const auto none = [](int64_t) { return std::vector<int64_t>{}; };
  // [2, 3] transposed to [3, 2], then flattened: 6 elements of two strides
  EXPECT_FALSE(ComposeView({2, 3}, {1, 2, 1, 0, 2, 0}, [](int64_t) { return std::vector<int64_t>{6}; }, &view));
  // a Reshape whose dims cut across the transposed factors
  EXPECT_FALSE(ComposeView({4, 6}, {1, 2, 1, 0, 2, 0}, [](int64_t) { return std::vector<int64_t>{3, 8}; }, &view));
  EXPECT_FALSE(ComposeView({2, 3}, {3, 1, 0}, none, &view));      // squeeze of a dim of 2
  EXPECT_FALSE(ComposeView({2, 3}, {5, 1, 3}, none, &view));      // index out of range
  EXPECT_FALSE(ComposeView({2, 3}, {1, 3, 0, 1, 2}, none, &view));  // perm of the wrong rank
  EXPECT_FALSE(ComposeView({2, 3}, {9}, none, &view));             // no such record
  // a dense Reshape across dims is one stride per dim
  ASSERT_TRUE(ComposeView({2, 6}, {2, 0}, [](int64_t) { return std::vector<int64_t>{3, 4}; }, &view));
  EXPECT_EQ(view.strides, (std::vector<int64_t>{4, 1}));
}

}  // namespace
}  // namespace kaiwu
