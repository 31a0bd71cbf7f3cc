// Transpose, Slice, Expand and Tile against naive index-mapping references.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

#include "tensor_ops_test_util.h"

namespace kaiwu {
namespace {

using testing::AsDouble;
using testing::ExpectError;
using testing::ExpectTensor;
using testing::Ints;
using testing::IntsAttr;
using testing::MakeNode;
using testing::RandomOf;
using testing::RandomShape;
using testing::Ravel;
using testing::RunNode;
using testing::Unravel;

// want[out flat] = x[in_index(out index)] for every output element.
template <typename F>
std::vector<double> MapRef(const Tensor& x, const Shape& out, F in_index) {
  std::vector<double> xs = AsDouble(x), want(NumElements(out));
  for (int64_t f = 0; f < static_cast<int64_t>(want.size()); ++f)
    want[f] = xs[Ravel(in_index(Unravel(f, out)), x.shape())];
  return want;
}

void CheckTranspose(const Tensor& x, const std::vector<int64_t>& perm) {
  Shape out(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) out[d] = x.shape()[perm[d]];
  std::vector<double> want = MapRef(x, out, [&](const std::vector<int64_t>& o) {
    std::vector<int64_t> i(o.size());
    for (size_t d = 0; d < o.size(); ++d) i[perm[d]] = o[d];
    return i;
  });
  for (int threads : {1, 3})
    ExpectTensor(RunNode(MakeNode("Transpose", 1, 1, {{"perm", IntsAttr(perm)}}), {x}, threads)[0],
                 out, want, "transpose " + ShapeToString(x.shape()) + " " + ShapeToString(perm));
}

TEST(TensorOpsTranspose, MatchesReference) {
  std::mt19937 rng(21);
  const DType dtypes[] = {DType::kFloat32, DType::kInt64, DType::kUInt8, DType::kInt16};
  for (int trial = 0; trial < 40; ++trial) {
    Tensor x = RandomOf(dtypes[trial % 4], RandomShape(rng, 1, 5, 5), rng);
    std::vector<int64_t> perm(x.shape().size());
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    CheckTranspose(x, perm);
  }
  // The fast paths, at sizes that split across threads and leave partial tiles.
  CheckTranspose(RandomOf(DType::kFloat32, {300, 203}, rng), {1, 0});
  CheckTranspose(RandomOf(DType::kFloat32, {4, 3, 37, 41}, rng), {0, 2, 3, 1});   // NCHW->NHWC
  CheckTranspose(RandomOf(DType::kFloat32, {4, 37, 41, 16}, rng), {0, 3, 1, 2});  // NHWC->NCHW
  CheckTranspose(RandomOf(DType::kInt64, {3, 50, 70}, rng), {0, 2, 1});
  // Default perm reverses the dims.
  Tensor x = RandomOf(DType::kFloat32, {2, 3, 4}, rng);
  std::vector<double> want = MapRef(x, {4, 3, 2}, [](const std::vector<int64_t>& o) {
    return std::vector<int64_t>{o[2], o[1], o[0]};
  });
  ExpectTensor(RunNode(MakeNode("Transpose", 1, 1), {x})[0], {4, 3, 2}, want, "default perm");
}

TEST(TensorOpsTranspose, BadPermThrows) {
  std::mt19937 rng(22);
  Tensor x = RandomOf(DType::kFloat32, {2, 3, 4}, rng);
  for (auto perm : std::vector<std::vector<int64_t>>{{0, 1}, {0, 1, 1}, {0, 1, 3}, {-1, 0, 1}})
    ExpectError([&] { RunNode(MakeNode("Transpose", 1, 1, {{"perm", IntsAttr(perm)}}), {x}); },
                StatusCode::kModel, "bad perm");
}

// ONNX Slice semantics, by enumerating the selected coordinates per axis.
std::vector<int64_t> SliceCoords(int64_t dim, int64_t start, int64_t end, int64_t step) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::min(std::max<int64_t>(start, 0), dim);
    end = std::min(std::max<int64_t>(end, 0), dim);
  } else {
    start = std::min(std::max<int64_t>(start, 0), dim - 1);
    end = std::min(std::max<int64_t>(end, -1), dim - 1);
  }
  std::vector<int64_t> c;
  for (int64_t i = start; step > 0 ? i < end : i > end; i += step) c.push_back(i);
  return c;
}

TEST(TensorOpsSlice, MatchesReference) {
  std::mt19937 rng(23);
  const int64_t kBig = std::numeric_limits<int64_t>::max();
  const int64_t kSmall = std::numeric_limits<int64_t>::min();
  auto pick = [&](int64_t dim) -> int64_t {
    int r = std::uniform_int_distribution<int>(0, 9)(rng);
    if (r == 0) return kBig;
    if (r == 1) return kSmall;
    return std::uniform_int_distribution<int64_t>(-dim - 2, dim + 2)(rng);
  };
  for (int trial = 0; trial < 60; ++trial) {
    DType dt = trial % 2 ? DType::kFloat32 : DType::kInt64;
    Tensor x = RandomOf(dt, RandomShape(rng, 1, 4, 6), rng);
    const int rank = static_cast<int>(x.shape().size());
    std::vector<int64_t> axes(rank);
    std::iota(axes.begin(), axes.end(), 0);
    std::shuffle(axes.begin(), axes.end(), rng);
    axes.resize(std::uniform_int_distribution<int>(1, rank)(rng));
    std::vector<int64_t> starts, ends, steps, attr_axes;
    std::vector<std::vector<int64_t>> coords(rank);
    for (int d = 0; d < rank; ++d) {
      coords[d].resize(x.shape()[d]);
      std::iota(coords[d].begin(), coords[d].end(), 0);
    }
    for (int64_t a : axes) {
      int64_t dim = x.shape()[a];
      int64_t step = std::uniform_int_distribution<int64_t>(-3, 3)(rng);
      if (step == 0) step = -1;
      starts.push_back(pick(dim));
      ends.push_back(pick(dim));
      steps.push_back(step);
      attr_axes.push_back(trial % 3 == 0 ? a - rank : a);  // negative axes too
      coords[a] = SliceCoords(dim, starts.back(), ends.back(), step);
    }
    Shape out(rank);
    for (int d = 0; d < rank; ++d) out[d] = static_cast<int64_t>(coords[d].size());
    std::vector<double> want = MapRef(x, out, [&](const std::vector<int64_t>& o) {
      std::vector<int64_t> i(o.size());
      for (int d = 0; d < rank; ++d) i[d] = coords[d][o[d]];
      return i;
    });
    for (int threads : {1, 3})
      ExpectTensor(RunNode(MakeNode("Slice", 5, 1),
                           {x, Ints(starts), Ints(ends), Ints(attr_axes), Ints(steps)}, threads)[0],
                   out, want, "slice trial " + std::to_string(trial));
  }
  // Axes and steps omitted; a large reversed slice that splits across threads.
  Tensor x = RandomOf(DType::kFloat32, {300, 80}, rng);
  std::vector<double> want = MapRef(x, {290, 80}, [](const std::vector<int64_t>& o) {
    return std::vector<int64_t>{o[0] + 5, o[1]};
  });
  ExpectTensor(RunNode(MakeNode("Slice", 3, 1), {x, Ints({5}), Ints({-5})})[0], {290, 80}, want,
               "slice default axes");
  want = MapRef(x, {300, 40}, [](const std::vector<int64_t>& o) {
    return std::vector<int64_t>{299 - o[0], 79 - 2 * o[1]};
  });
  for (int threads : {1, 3})
    ExpectTensor(RunNode(MakeNode("Slice", 5, 1), {x, Ints({-1, -1}), Ints({kSmall, kSmall}),
                                                   Ints({0, 1}), Ints({-1, -2})}, threads)[0],
                 {300, 40}, want, "slice reversed");
  // Attribute form (opset 9).
  Node old = MakeNode("Slice", 1, 1, {{"starts", IntsAttr({1})}, {"ends", IntsAttr({-1})},
                                      {"axes", IntsAttr({1})}});
  old.opset = 9;
  want = MapRef(x, {300, 78}, [](const std::vector<int64_t>& o) {
    return std::vector<int64_t>{o[0], o[1] + 1};
  });
  ExpectTensor(RunNode(old, {x})[0], {300, 78}, want, "slice attribute form");
}

TEST(TensorOpsSlice, Errors) {
  std::mt19937 rng(24);
  Tensor x = RandomOf(DType::kFloat32, {4, 5}, rng);
  Node n = MakeNode("Slice", 5, 1);
  ExpectError([&] { RunNode(n, {x, Ints({0}), Ints({3}), Ints({0}), Ints({0})}); },
              StatusCode::kModel, "zero step");
  ExpectError([&] { RunNode(n, {x, Ints({0, 0}), Ints({3, 3}), Ints({1, -1}), Ints({1, 1})}); },
              StatusCode::kModel, "repeated axis");
  ExpectError([&] { RunNode(n, {x, Ints({0}), Ints({3, 3}), Ints({1}), Ints({1})}); },
              StatusCode::kModel, "length mismatch");
}

// Expand: numpy broadcasting of x against `shape`.
TEST(TensorOpsExpand, MatchesReference) {
  std::mt19937 rng(25);
  struct Case { Shape x; std::vector<int64_t> shape; Shape out; };
  std::vector<Case> cases = {{{3, 1}, {2, 3, 4}, {2, 3, 4}},  {{1}, {5, 2}, {5, 2}},
                             {{2, 1, 3}, {1, 4, 1}, {2, 4, 3}}, {{4, 5}, {1}, {4, 5}},
                             {{1, 1}, {3, 1, 2}, {3, 1, 2}},    {{}, {2, 2}, {2, 2}},
                             {{1, 64}, {700, 64}, {700, 64}},   {{700, 1}, {700, 64}, {700, 64}}};
  for (const Case& c : cases) {
    Tensor x = RandomOf(DType::kFloat32, c.x, rng);
    size_t lead = c.out.size() - c.x.size();
    std::vector<double> want = MapRef(x, c.out, [&](const std::vector<int64_t>& o) {
      std::vector<int64_t> i(c.x.size());
      for (size_t d = 0; d < i.size(); ++d) i[d] = c.x[d] == 1 ? 0 : o[d + lead];
      return i;
    });
    for (int threads : {1, 3})
      ExpectTensor(RunNode(MakeNode("Expand", 2, 1), {x, Ints(c.shape)}, threads)[0], c.out,
                   want, "expand " + ShapeToString(c.x));
  }
  Tensor x = RandomOf(DType::kFloat32, {2, 3}, rng);
  ExpectError([&] { RunNode(MakeNode("Expand", 2, 1), {x, Ints({4, 3})}); }, StatusCode::kModel,
              "expand mismatch");
}

TEST(TensorOpsTile, MatchesReference) {
  std::mt19937 rng(26);
  for (int trial = 0; trial < 20; ++trial) {
    Tensor x = RandomOf(trial % 2 ? DType::kFloat32 : DType::kBool, RandomShape(rng, 1, 4, 4), rng);
    std::vector<int64_t> reps;
    Shape out;
    for (int64_t d : x.shape()) {
      reps.push_back(std::uniform_int_distribution<int>(0, 3)(rng));
      out.push_back(d * reps.back());
    }
    std::vector<double> want = MapRef(x, out, [&](const std::vector<int64_t>& o) {
      std::vector<int64_t> i(o.size());
      for (size_t d = 0; d < o.size(); ++d) i[d] = o[d] % x.shape()[d];
      return i;
    });
    for (int threads : {1, 3})
      ExpectTensor(RunNode(MakeNode("Tile", 2, 1), {x, Ints(reps)}, threads)[0], out, want,
                   "tile " + ShapeToString(x.shape()) + " x " + ShapeToString(reps));
  }
  Tensor big = RandomOf(DType::kFloat32, {100, 30}, rng);
  std::vector<double> want = MapRef(big, {400, 60}, [](const std::vector<int64_t>& o) {
    return std::vector<int64_t>{o[0] % 100, o[1] % 30};
  });
  for (int threads : {1, 3})
    ExpectTensor(RunNode(MakeNode("Tile", 2, 1), {big, Ints({4, 2})}, threads)[0], {400, 60},
                 want, "tile large");
  ExpectError([&] { RunNode(MakeNode("Tile", 2, 1), {big, Ints({2})}); }, StatusCode::kModel,
              "repeats length");
  ExpectError([&] { RunNode(MakeNode("Tile", 2, 1), {big, Ints({2, -1})}); }, StatusCode::kModel,
              "negative repeat");
}

}  // namespace
}  // namespace kaiwu
