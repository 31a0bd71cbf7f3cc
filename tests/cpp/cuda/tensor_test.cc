// The CUDA data-movement and reduction kernels (backends/cuda/tensor*.cu)
// against the CPU kernels on the same random inputs. Data movement must match
// bit for bit (rtol = atol = 0); float reductions and atomically combined
// scatters sum in another order (rtol 1e-4, atol 1e-5, positive data for sums
// so that nothing cancels).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_harness.h"
#include "../tensor_ops_test_util.h"

namespace kaiwu {
namespace testing {
namespace {

constexpr float kExact = 0.f;

// Runs `node` on the CPU and on CUDA (the inputs in `const_inputs` visible to
// the CUDA Prepare, as shape operands are in a plan) and compares every output.
void ExpectMatchesCpu(const Node& node, const std::vector<Tensor>& inputs,
                      const std::vector<int>& const_inputs, float rtol, float atol,
                      const std::string& what) {
  std::vector<Tensor> want = RunNode(node, inputs);
  std::vector<Tensor> got = RunNodeCuda(node, inputs, const_inputs);
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i].dtype() == DType::kUndefined) continue;
    ExpectTensorsClose(got[i], want[i], rtol, atol, what + ", output " + std::to_string(i));
  }
}

void ExpectExact(const Node& node, const std::vector<Tensor>& inputs,
                 const std::vector<int>& const_inputs, const std::string& what) {
  ExpectMatchesCpu(node, inputs, const_inputs, kExact, kExact, what);
}

// Random integers in [lo, hi] of dtype int64 or int32.
Tensor RandomIndices(DType dtype, Shape shape, int64_t lo, int64_t hi, std::mt19937& rng) {
  Tensor t(dtype, std::move(shape));
  std::uniform_int_distribution<int64_t> dist(lo, hi);
  for (int64_t i = 0; i < t.size(); ++i) {
    if (dtype == DType::kInt64)
      t.As<int64_t>()[i] = dist(rng);
    else
      t.As<int32_t>()[i] = static_cast<int32_t>(dist(rng));
  }
  return t;
}

Tensor Ints32(std::vector<int32_t> v) {
  return MakeTensor<int32_t>({static_cast<int64_t>(v.size())}, v);
}

Tensor ScalarOf(DType dtype, double v) {
  Tensor t(dtype, {});
  switch (dtype) {
    case DType::kFloat32: *t.As<float>() = static_cast<float>(v); break;
    case DType::kInt64: *t.As<int64_t>() = static_cast<int64_t>(v); break;
    default: ADD_FAILURE() << "unexpected dtype";
  }
  return t;
}

// ---- views

TEST(CudaTensorView, ReshapeFlattenSqueezeUnsqueezeIdentity) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(1);
  Tensor x = RandomOf(DType::kFloat32, {2, 3, 4}, rng);
  Tensor xi = RandomOf(DType::kInt64, {2, 1, 3, 1, 5}, rng);
  ExpectExact(MakeNode("Reshape", 2, 1), {x, Ints({4, -1})}, {1}, "reshape");
  ExpectExact(MakeNode("Reshape", 2, 1), {xi, Ints({0, 0, -1})}, {1}, "reshape copy dims");
  ExpectExact(MakeNode("Flatten", 1, 1, {{"axis", IntAttr(-1)}}), {xi}, {}, "flatten");
  ExpectExact(MakeNode("Squeeze", 2, 1), {xi, Ints({-2, 1})}, {1}, "squeeze axes");
  ExpectExact(MakeNode("Squeeze", 1, 1), {xi}, {}, "squeeze all");
  ExpectExact(MakeNode("Unsqueeze", 2, 1), {x, Ints({-1, 0})}, {1}, "unsqueeze");
  ExpectExact(MakeNode("Identity", 1, 1), {xi}, {}, "identity rank 5");
  ExpectExact(MakeNode("Identity", 1, 1), {RandomOf(DType::kFloat32, {}, rng)}, {},
              "identity scalar");
  ExpectExact(MakeNode("Identity", 1, 1), {RandomOf(DType::kUInt8, {37}, rng)}, {},
              "identity uint8");
}

TEST(CudaTensorView, Dropout) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(2);
  Tensor x = RandomOf(DType::kFloat32, {3, 17}, rng);
  Tensor ratio = ScalarOf(DType::kFloat32, 0.5);
  ExpectExact(MakeNode("Dropout", 1, 1), {x}, {}, "dropout");
  ExpectExact(MakeNode("Dropout", 1, 2), {x}, {}, "dropout with mask");
  // training_mode unknown at plan time: checked on the device.
  ExpectExact(MakeNode("Dropout", 3, 2), {x, ratio, BoolScalar(false)}, {}, "training off");
  ExpectError([&] { RunNodeCuda(MakeNode("Dropout", 3, 2), {x, ratio, BoolScalar(true)}); },
              StatusCode::kRuntime, "training-mode dropout");
}

// ---- Transpose, Slice, Expand, Tile

TEST(CudaTensorStrided, Transpose) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(3);
  auto check = [&](DType dtype, Shape shape, std::vector<int64_t> perm) {
    Tensor x = RandomOf(dtype, shape, rng);
    ExpectExact(MakeNode("Transpose", 1, 1, {{"perm", IntsAttr(perm)}}), {x}, {},
                "transpose " + ShapeToString(shape) + " " + ShapeToString(perm));
  };
  for (DType dt : {DType::kFloat32, DType::kInt64, DType::kUInt8, DType::kInt16}) {
    check(dt, {4, 3, 37, 41}, {0, 2, 3, 1});  // NCHW -> NHWC, 3 planes (planes-innermost path)
    check(dt, {1, 4, 21, 21}, {0, 2, 3, 1});  // one image (merged to 2 dims)
    check(dt, {2, 7, 9, 5}, {0, 2, 3, 1});    // 7 planes
    // 2 and 8 planes: 8- or 16-byte pixels for some of these types (one store a pixel), not others
    check(dt, {3, 8, 19, 23}, {0, 2, 3, 1});
    check(dt, {3, 2, 19, 23}, {0, 2, 3, 1});
    check(dt, {1, 8, 5, 3}, {0, 2, 3, 1});
    check(dt, {4, 16, 37, 41}, {0, 2, 3, 1});  // NCHW -> NHWC (tiled path)
    check(dt, {4, 37, 41, 16}, {0, 3, 1, 2});  // NHWC -> NCHW (tiled path)
    check(dt, {4, 37, 41, 3}, {0, 3, 1, 2});   // NHWC -> NCHW, 3 channels (gather path)
    check(dt, {5, 6, 7}, {2, 0, 1});
    check(dt, {300, 203}, {1, 0});
    check(dt, {17}, {0});
  }
  check(DType::kFloat32, {2, 3, 4, 5, 6}, {4, 2, 0, 3, 1});  // rank 5
  check(DType::kInt64, {3, 1, 4, 1, 5}, {1, 3, 0, 2, 4});     // size-1 dims
  check(DType::kFloat32, {6, 5, 4}, {0, 2, 1});
  check(DType::kFloat32, {2, 64, 33}, {1, 0, 2});               // last axis stays (gather path)
  for (int trial = 0; trial < 10; ++trial) {
    Shape s = RandomShape(rng, 1, 6, 6);
    std::vector<int64_t> perm(s.size());
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    check(trial % 2 ? DType::kInt64 : DType::kFloat32, s, perm);
  }
  ExpectExact(MakeNode("Transpose", 1, 1), {RandomOf(DType::kFloat32, {2, 3, 4}, rng)}, {},
              "default perm");
}

TEST(CudaTensorStrided, Slice) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(4);
  Node slice = MakeNode("Slice", 5, 1);
  Node slice3 = MakeNode("Slice", 3, 1);
  const std::vector<int> operands = {1, 2, 3, 4};
  for (DType dt : {DType::kFloat32, DType::kInt64}) {
    Tensor x = RandomOf(dt, {6, 7, 8}, rng);
    ExpectExact(slice, {x, Ints({1, -2}), Ints({5, 100}), Ints({0, -1}), Ints({2, 1})}, operands,
                "steps and clamped end");
    ExpectExact(slice, {x, Ints({-1, 100}), Ints({-100, -8}), Ints({1, 2}), Ints({-1, -2})},
                operands, "negative steps, clamped");
    ExpectExact(slice, {x, Ints({5}), Ints({1}), Ints({-3}), Ints({-3})}, operands,
                "negative step on axis 0");
    ExpectExact(slice, {x, Ints({3}), Ints({3}), Ints({2}), Ints({1})}, operands, "empty");
    ExpectExact(slice3, {x, Ints({0, 2}), Ints({4, 6})}, {1, 2}, "no axes, no steps");
    ExpectExact(slice, {x, Ints({-4}), Ints({1000}), Ints({-1}), Ints({1})}, operands,
                "last axis tail");
  }
  // Whole-row slabs: moved in wide elements.
  Tensor rows = RandomOf(DType::kFloat32, {8, 16}, rng);
  ExpectExact(slice, {rows, Ints({4}), Ints({12}), Ints({1}), Ints({1})}, operands, "wide");
  ExpectExact(slice, {rows, Ints({1}), Ints({8}), Ints({0}), Ints({2})}, operands, "row step");
  // Rank 1 and rank 5, int32 operands.
  Tensor v = RandomOf(DType::kFloat32, {29}, rng);
  ExpectExact(slice, {v, Ints32({25}), Ints32({-30}), Ints32({0}), Ints32({-4})}, operands,
              "rank 1");
  Tensor x5 = RandomOf(DType::kInt64, {3, 4, 2, 5, 6}, rng);
  ExpectExact(slice,
              {x5, Ints({-1, 1, 0}), Ints({-4, 4, 5}), Ints({0, 3, -1}), Ints({-1, 2, 2})},
              operands, "rank 5");
}

TEST(CudaTensorStrided, ExpandAndTile) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(5);
  for (DType dt : {DType::kFloat32, DType::kInt64}) {
    ExpectExact(MakeNode("Expand", 2, 1), {RandomOf(dt, {3, 1, 5}, rng), Ints({2, 3, 4, 5})},
                {1}, "expand");
    ExpectExact(MakeNode("Expand", 2, 1), {RandomOf(dt, {1}, rng), Ints({7})}, {1},
                "expand scalar");
    ExpectExact(MakeNode("Expand", 2, 1), {RandomOf(dt, {4, 1}, rng), Ints({1, 1, 6})}, {1},
                "expand both ways");
    ExpectExact(MakeNode("Tile", 2, 1), {RandomOf(dt, {2, 3}, rng), Ints({3, 2})}, {1}, "tile");
    ExpectExact(MakeNode("Tile", 2, 1), {RandomOf(dt, {2, 1, 3, 2, 2}, rng),
                                         Ints({1, 3, 2, 1, 2})},
                {1}, "tile rank 5");
  }
}

// ---- Concat, Split

TEST(CudaTensorConcat, Concat) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(6);
  for (DType dt : {DType::kFloat32, DType::kInt64, DType::kUInt8}) {
    ExpectExact(MakeNode("Concat", 3, 1, {{"axis", IntAttr(-1)}}),
                {RandomOf(dt, {2, 3, 5}, rng), RandomOf(dt, {2, 3, 1}, rng),
                 RandomOf(dt, {2, 3, 7}, rng)},
                {}, "concat last axis");
    ExpectExact(MakeNode("Concat", 2, 1, {{"axis", IntAttr(0)}}),
                {RandomOf(dt, {2, 4}, rng), RandomOf(dt, {3, 4}, rng)}, {}, "concat axis 0");
    ExpectExact(MakeNode("Concat", 3, 1, {{"axis", IntAttr(1)}}),
                {RandomOf(dt, {2, 1, 3}, rng), RandomOf(dt, {2, 0, 3}, rng),
                 RandomOf(dt, {2, 4, 3}, rng)},
                {}, "concat middle axis with an empty input");
  }
  ExpectExact(MakeNode("Concat", 2, 1, {{"axis", IntAttr(0)}}),
              {RandomOf(DType::kFloat32, {5}, rng), RandomOf(DType::kFloat32, {3}, rng)}, {},
              "rank 1");
  ExpectExact(MakeNode("Concat", 2, 1, {{"axis", IntAttr(-3)}}),
              {RandomOf(DType::kInt64, {2, 2, 3, 1, 2}, rng),
               RandomOf(DType::kInt64, {2, 2, 1, 1, 2}, rng)},
              {}, "rank 5");
}

TEST(CudaTensorConcat, Split) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(7);
  for (DType dt : {DType::kFloat32, DType::kInt64}) {
    Tensor x = RandomOf(dt, {3, 10, 4}, rng);
    ExpectExact(MakeNode("Split", 2, 3, {{"axis", IntAttr(1)}}), {x, Ints({2, 3, 5})}, {1},
                "split sizes");
    ExpectExact(MakeNode("Split", 2, 3, {{"axis", IntAttr(-2)}}), {x, Ints({4, 0, 6})}, {1},
                "split with an empty part");
    ExpectExact(MakeNode("Split", 1, 3, {{"axis", IntAttr(-1)}, {"num_outputs", IntAttr(3)}}),
                {x}, {}, "num_outputs, uneven");
    ExpectExact(MakeNode("Split", 1, 3), {x}, {}, "equal split on axis 0");
  }
  ExpectExact(MakeNode("Split", 2, 2), {RandomOf(DType::kFloat32, {9}, rng), Ints({4, 5})}, {1},
              "rank 1");
}

// ---- Pad

TEST(CudaTensorPad, Modes) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(8);
  for (DType dt : {DType::kFloat32, DType::kInt64}) {
    Tensor x = RandomOf(dt, {3, 4, 5}, rng);
    Tensor value = dt == DType::kFloat32 ? ScalarOf(dt, 2.5) : ScalarOf(dt, -7);
    Tensor pads = Ints({1, 0, 2, 2, 3, 1});
    for (const char* mode : {"constant", "reflect", "edge", "wrap"}) {
      Node pad = MakeNode("Pad", 2, 1, {{"mode", StrAttr(mode)}});
      ExpectExact(pad, {x, pads}, {1}, std::string(mode) + " pad");
      ExpectExact(pad, {x, Ints({0, -1, 1, 1, 2, -2})}, {1}, std::string(mode) + " crop");
    }
    // The constant value is a runtime input; axes select the padded dims.
    ExpectExact(MakeNode("Pad", 3, 1), {x, pads, value}, {1}, "constant value");
    ExpectExact(MakeNode("Pad", 4, 1, {{"mode", StrAttr("reflect")}}),
                {x, Ints({3, 2, 1, 4}), Tensor(), Ints({-1, 1})}, {1, 3}, "reflect with axes");
    ExpectExact(MakeNode("Pad", 4, 1), {x, Ints({2, 3}), value, Ints({0})}, {1, 3},
                "constant with axes");
  }
  ExpectExact(MakeNode("Pad", 2, 1, {{"mode", StrAttr("edge")}}),
              {RandomOf(DType::kFloat32, {6}, rng), Ints({3, 2})}, {1}, "rank 1");
  ExpectExact(MakeNode("Pad", 2, 1),
              {RandomOf(DType::kFloat32, {2, 1, 3, 2, 2}, rng), Ints({0, 1, 0, 1, 1, 1, 2, 0, 0, 1})},
              {1}, "rank 5");
}

// ---- Gather family

TEST(CudaTensorGather, Gather) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(9);
  for (DType dt : {DType::kFloat32, DType::kInt64}) {
    Tensor x = RandomOf(dt, {5, 6, 7}, rng);
    for (DType it : {DType::kInt64, DType::kInt32}) {
      ExpectExact(MakeNode("Gather", 2, 1), {x, RandomIndices(it, {4}, -5, 4, rng)}, {},
                  "axis 0, negative indices");
      ExpectExact(MakeNode("Gather", 2, 1, {{"axis", IntAttr(-1)}}),
                  {x, RandomIndices(it, {2, 3}, -7, 6, rng)}, {}, "axis -1, 2-D indices");
      ExpectExact(MakeNode("Gather", 2, 1, {{"axis", IntAttr(1)}}),
                  {x, RandomIndices(it, {}, -6, 5, rng)}, {}, "scalar index");
    }
  }
  ExpectExact(MakeNode("Gather", 2, 1),
              {RandomOf(DType::kFloat32, {11}, rng), RandomIndices(DType::kInt64, {20}, -11, 10, rng)},
              {}, "rank 1");
  // Rows of a multiple of 16 bytes take the 16-byte vector path: float rows of 8 and
  // 12, int64 rows of 2, on axis 0 (attention's q / k / v) and a middle axis, with
  // negative, repeated and scalar indices.
  for (DType it : {DType::kInt64, DType::kInt32}) {
    ExpectExact(MakeNode("Gather", 2, 1), {RandomOf(DType::kFloat32, {3, 5, 8}, rng), RandomIndices(it, {}, -3, 2, rng)},
                {}, "16-byte rows, scalar index");
    ExpectExact(MakeNode("Gather", 2, 1, {{"axis", IntAttr(1)}}),
                {RandomOf(DType::kFloat32, {4, 9, 12}, rng), RandomIndices(it, {3, 5}, -9, 8, rng)}, {},
                "48-byte rows, middle axis");
    ExpectExact(MakeNode("Gather", 2, 1, {{"axis", IntAttr(-2)}}),
                {RandomOf(DType::kInt64, {2, 7, 2}, rng), RandomIndices(it, {6}, -7, 6, rng)}, {},
                "int64 pairs");
  }
}

TEST(CudaTensorGather, GatherOutOfRangeIsRuntimeError) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(10);
  Tensor x = RandomOf(DType::kFloat32, {5, 6}, rng);
  ExpectError([&] { RunNodeCuda(MakeNode("Gather", 2, 1), {x, Ints({0, 5, 1})}); },
              StatusCode::kRuntime, "index 5 on an axis of 5");
  ExpectError([&] { RunNodeCuda(MakeNode("Gather", 2, 1, {{"axis", IntAttr(1)}}),
                                {x, Ints32({-7})}); },
              StatusCode::kRuntime, "index -7 on an axis of 6");
  Tensor rows = RandomOf(DType::kFloat32, {5, 8}, rng);  // 32-byte rows: the vector path
  ExpectError([&] { RunNodeCuda(MakeNode("Gather", 2, 1), {rows, Ints({1, -6})}); },
              StatusCode::kRuntime, "index -6 on an axis of 5");
  ExpectError([&] { RunNodeCuda(MakeNode("GatherElements", 2, 1),
                                {x, MakeTensor<int64_t>({1, 2}, {0, 9})}); },
              StatusCode::kRuntime, "GatherElements index 9");
  ExpectError([&] { RunNodeCuda(MakeNode("GatherND", 2, 1),
                                {x, MakeTensor<int64_t>({1, 2}, {1, 6})}); },
              StatusCode::kRuntime, "GatherND index 6");
}

TEST(CudaTensorGather, GatherElementsAndGatherND) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(11);
  for (DType dt : {DType::kFloat32, DType::kInt64}) {
    Tensor x = RandomOf(dt, {4, 5, 6}, rng);
    ExpectExact(MakeNode("GatherElements", 2, 1, {{"axis", IntAttr(1)}}),
                {x, RandomIndices(DType::kInt64, {3, 7, 6}, -5, 4, rng)}, {},
                "gather elements axis 1");
    ExpectExact(MakeNode("GatherElements", 2, 1, {{"axis", IntAttr(-1)}}),
                {x, RandomIndices(DType::kInt32, {4, 2, 3}, -6, 5, rng)}, {},
                "gather elements axis -1");
    ExpectExact(MakeNode("GatherND", 2, 1),
                {x, RandomIndices(DType::kInt64, {3, 2}, -4, 3, rng)}, {}, "gather nd k=2");
    ExpectExact(MakeNode("GatherND", 2, 1),
                {x, RandomIndices(DType::kInt32, {2, 2, 1}, -4, 3, rng)}, {}, "gather nd k=1");
    ExpectExact(MakeNode("GatherND", 2, 1, {{"batch_dims", IntAttr(1)}}),
                {x, RandomIndices(DType::kInt64, {4, 3, 2}, -5, 4, rng)}, {},
                "gather nd batch_dims 1");
  }
}

TEST(CudaTensorGather, OneHot) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(12);
  Tensor values_f = MakeTensor<float>({2}, {-0.5f, 3.f});
  Tensor values_i = MakeTensor<int64_t>({2}, {0, 1});
  Tensor depth = ScalarOf(DType::kInt64, 6);
  // Indices out of [-6, 5] give all-off rows.
  Tensor idx = RandomIndices(DType::kInt64, {3, 4}, -8, 7, rng);
  ExpectExact(MakeNode("OneHot", 3, 1), {idx, depth, values_f}, {1}, "axis -1");
  ExpectExact(MakeNode("OneHot", 3, 1, {{"axis", IntAttr(0)}}), {idx, depth, values_i}, {1},
              "axis 0");
  ExpectExact(MakeNode("OneHot", 3, 1, {{"axis", IntAttr(1)}}),
              {RandomIndices(DType::kInt32, {5, 2}, -6, 5, rng), depth, values_f}, {1},
              "int32, axis 1");
  Tensor idx_f = MakeTensor<float>({6}, {0.f, 2.7f, -1.2f, 9.f, -6.f, 5.f});
  ExpectExact(MakeNode("OneHot", 3, 1), {idx_f, depth, values_i}, {1}, "float indices");
}

// ---- Scatter family

TEST(CudaTensorScatter, ScatterElements) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(13);
  // Reduction none: distinct positions per row (a prefix of a permutation), some negative.
  Tensor x = RandomOf(DType::kFloat32, {3, 6}, rng);
  std::vector<int64_t> idx;
  for (int row = 0; row < 3; ++row) {
    std::vector<int64_t> perm(6);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int j = 0; j < 4; ++j) idx.push_back(j % 2 ? perm[j] - 6 : perm[j]);
  }
  Tensor ind = MakeTensor<int64_t>({3, 4}, idx);
  ExpectExact(MakeNode("ScatterElements", 3, 1, {{"axis", IntAttr(-1)}}),
              {x, ind, RandomOf(DType::kFloat32, {3, 4}, rng)}, {}, "none, float32");
  Tensor xi = RandomOf(DType::kInt64, {3, 6}, rng);
  ExpectExact(MakeNode("ScatterElements", 3, 1, {{"axis", IntAttr(1)}}),
              {xi, ind, RandomOf(DType::kInt64, {3, 4}, rng)}, {}, "none, int64");
  // Reductions: duplicates combine (float sums in any order).
  Tensor x3 = RandomTensor({4, 5, 3}, rng, 0.5f, 1.5f);
  Tensor dup = RandomIndices(DType::kInt32, {4, 8, 3}, -5, 4, rng);
  Tensor upd = RandomTensor({4, 8, 3}, rng, 0.5f, 1.5f);
  for (const char* r : {"add", "mul", "max", "min"})
    ExpectMatchesCpu(MakeNode("ScatterElements", 3, 1,
                              {{"axis", IntAttr(1)}, {"reduction", StrAttr(r)}}),
                     {x3, dup, upd}, {}, 1e-5f, 1e-6f, std::string("reduction ") + r);
  Tensor x3i = RandomOf(DType::kInt64, {4, 5, 3}, rng);
  Tensor updi = RandomOf(DType::kInt64, {4, 8, 3}, rng);
  for (const char* r : {"add", "max", "min"})
    ExpectExact(MakeNode("ScatterElements", 3, 1, {{"axis", IntAttr(1)}, {"reduction", StrAttr(r)}}),
                {x3i, dup, updi}, {}, std::string("int64 reduction ") + r);
  ExpectError([&] { RunNodeCuda(MakeNode("ScatterElements", 3, 1),
                                {x, MakeTensor<int64_t>({1, 2}, {0, 3}),
                                 RandomOf(DType::kFloat32, {1, 2}, rng)}); },
              StatusCode::kRuntime, "ScatterElements index 3 on an axis of 3");
}

TEST(CudaTensorScatter, ScatterND) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(14);
  for (DType dt : {DType::kFloat32, DType::kInt64}) {
    Tensor x = RandomOf(dt, {5, 4, 3}, rng);
    ExpectExact(MakeNode("ScatterND", 3, 1),
                {x, MakeTensor<int64_t>({3, 1}, {4, -5, 2}), RandomOf(dt, {3, 4, 3}, rng)}, {},
                "none, k=1");
    ExpectExact(MakeNode("ScatterND", 3, 1),
                {x, MakeTensor<int32_t>({2, 2}, {1, 2, -1, 0}), RandomOf(dt, {2, 3}, rng)}, {},
                "none, k=2");
    ExpectExact(MakeNode("ScatterND", 3, 1),
                {x, MakeTensor<int64_t>({2, 3}, {1, 2, 0, -1, -4, -3}), RandomOf(dt, {2}, rng)},
                {}, "none, k=3");
  }
  Tensor x = RandomTensor({5, 4, 3}, rng, 0.5f, 1.5f);
  Tensor dup = MakeTensor<int64_t>({4, 1}, {1, 3, -4, 1});
  Tensor upd = RandomTensor({4, 4, 3}, rng, 0.5f, 1.5f);
  for (const char* r : {"add", "mul", "max", "min"})
    ExpectMatchesCpu(MakeNode("ScatterND", 3, 1, {{"reduction", StrAttr(r)}}), {x, dup, upd}, {},
                     1e-5f, 1e-6f, std::string("reduction ") + r);
  ExpectError([&] { RunNodeCuda(MakeNode("ScatterND", 3, 1),
                                {x, MakeTensor<int64_t>({1, 1}, {5}),
                                 RandomOf(DType::kFloat32, {1, 4, 3}, rng)}); },
              StatusCode::kRuntime, "ScatterND index 5 on an axis of 5");
}

// ---- CumSum, TopK

TEST(CudaTensorScan, CumSum) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(15);
  for (int exclusive : {0, 1})
    for (int reverse : {0, 1}) {
      Node node = MakeNode("CumSum", 2, 1,
                           {{"exclusive", IntAttr(exclusive)}, {"reverse", IntAttr(reverse)}});
      std::string what = "exclusive " + std::to_string(exclusive) + " reverse " +
                         std::to_string(reverse);
      Tensor x = RandomOf(DType::kFloat32, {3, 9, 20}, rng);
      ExpectMatchesCpu(node, {x, Ints({1})}, {1}, 1e-5f, 1e-6f, what + ", axis 1");
      ExpectMatchesCpu(node, {x, Ints32({-1})}, {1}, 1e-5f, 1e-6f, what + ", axis -1");
      ExpectExact(node, {RandomOf(DType::kInt64, {4, 5, 6}, rng), Ints({0})}, {1},
                  what + ", int64 axis 0");
      ExpectMatchesCpu(node, {RandomOf(DType::kFloat32, {50}, rng), Ints({0})}, {1}, 1e-5f,
                       1e-6f, what + ", rank 1");
    }
}

TEST(CudaTensorScan, TopK) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(16);
  Tensor x = RandomOf(DType::kFloat32, {4, 7, 30}, rng);
  Tensor xi = RandomOf(DType::kInt64, {12, 5, 3}, rng);  // values in 201 levels: ties
  for (int largest : {1, 0}) {
    std::string what = largest ? "largest" : "smallest";
    ExpectExact(MakeNode("TopK", 2, 2, {{"largest", IntAttr(largest)}}), {x, Ints({5})}, {1},
                what + ", axis -1");
    ExpectExact(MakeNode("TopK", 2, 2, {{"axis", IntAttr(1)}, {"largest", IntAttr(largest)}}),
                {x, Ints({7})}, {1}, what + ", k = dim");
    ExpectExact(MakeNode("TopK", 2, 2, {{"axis", IntAttr(0)}, {"largest", IntAttr(largest)}}),
                {xi, Ints({4})}, {1}, what + ", int64 ties, axis 0");
  }
  Tensor wide = RandomOf(DType::kFloat32, {3, 100}, rng);
  ExpectExact(MakeNode("TopK", 2, 2), {wide, Ints({64})}, {1}, "k = 64");
  ExpectExact(MakeNode("TopK", 2, 2), {wide, Ints({0})}, {1}, "k = 0");
  ExpectError([&] { RunNodeCuda(MakeNode("TopK", 2, 2), {wide, Ints({65})}, {1}); },
              StatusCode::kUnsupported, "k = 65");
}

// ---- reductions

const char* const kReduceOps[] = {"ReduceSum",  "ReduceMean",      "ReduceMax",
                                  "ReduceMin",  "ReduceProd",      "ReduceL1",
                                  "ReduceL2",   "ReduceSumSquare", "ReduceLogSum",
                                  "ReduceLogSumExp"};

// Reduces x with `op` over `axes` (none: the input is omitted) for keepdims 0 and 1.
void CheckReduce(const std::string& op, const Tensor& x, const std::vector<int64_t>* axes,
                 const std::string& what, int noop = 0) {
  for (int keepdims : {0, 1}) {
    Node node = MakeNode(op, axes ? 2 : 1, 1,
                         {{"keepdims", IntAttr(keepdims)}, {"noop_with_empty_axes", IntAttr(noop)}});
    std::vector<Tensor> inputs = {x};
    if (axes) inputs.push_back(Ints(*axes));
    const bool exact = x.dtype() != DType::kFloat32 || op == "ReduceMax" || op == "ReduceMin";
    ExpectMatchesCpu(node, inputs, {1}, exact ? kExact : 1e-4f, exact ? kExact : 1e-5f,
                     op + " " + what + " keepdims " + std::to_string(keepdims));
  }
}

TEST(CudaTensorReduce, AllOpsAndAxes) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(17);
  for (const char* op : kReduceOps) {
    const bool signed_data = std::string(op) == "ReduceMax" || std::string(op) == "ReduceMin";
    auto data = [&](Shape s) {
      return signed_data ? RandomTensor(std::move(s), rng) : RandomTensor(std::move(s), rng, 0.5f, 1.5f);
    };
    Tensor x = data({3, 4, 5});
    std::vector<int64_t> none, one = {1}, last = {-1}, outer = {0, 2}, all = {0, 1, 2};
    CheckReduce(op, x, nullptr, "default axes (all)");
    CheckReduce(op, x, &none, "empty axes (all)");
    CheckReduce(op, x, &none, "noop_with_empty_axes", 1);
    CheckReduce(op, x, &one, "axis 1");
    CheckReduce(op, x, &last, "axis -1");
    CheckReduce(op, x, &outer, "axes 0, 2");
    CheckReduce(op, x, &all, "all axes");
    std::vector<int64_t> zero = {0};
    CheckReduce(op, data({23}), &zero, "rank 1");
    std::vector<int64_t> r5 = {-4, 2, 4};
    CheckReduce(op, data({2, 3, 1, 4, 3}), &r5, "rank 5");
    std::vector<int64_t> r5b = {0, -1};
    CheckReduce(op, data({2, 3, 2, 4, 3}), &r5b, "rank 5, outer and inner");
  }
}

TEST(CudaTensorReduce, LongReductions) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(18);
  const char* ops[] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                       "ReduceL2", "ReduceLogSumExp", "ReduceL1"};
  for (const char* op : ops) {
    std::vector<int64_t> inner = {1}, outer = {0}, middle = {1}, both = {0, 2};
    CheckReduce(op, RandomTensor({3, 5000}, rng, 0.5f, 1.5f), &inner, "long inner (block)");
    CheckReduce(op, RandomTensor({70, 300}, rng, 0.5f, 1.5f), &inner, "medium inner (block)");
    CheckReduce(op, RandomTensor({5000, 3}, rng, 0.5f, 1.5f), &outer, "long outer (block)");
    CheckReduce(op, RandomTensor({4, 2000, 33}, rng, 0.5f, 1.5f), &middle, "long middle");
    CheckReduce(op, RandomTensor({40, 7, 50}, rng, 0.5f, 1.5f), &both, "outer and inner");
    CheckReduce(op, RandomTensor({100000}, rng, 0.5f, 1.5f), nullptr, "all of 100000");
  }
}

// Few outputs of 16+ float elements each: a warp per output (the masked mean over
// units of a policy, [B, N, d] summed over N), float32 and odd sizes.
TEST(CudaTensorReduce, FewOutputsAWarpEach) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(21);
  for (const char* op : kReduceOps) {
    const bool signed_data = std::string(op) == "ReduceMax" || std::string(op) == "ReduceMin";
    auto data = [&](Shape s) {
      return signed_data ? RandomTensor(std::move(s), rng) : RandomTensor(std::move(s), rng, 0.5f, 1.5f);
    };
    std::vector<int64_t> units = {1}, inner = {-1}, two = {1, 2};
    CheckReduce(op, data({4, 37, 64}), &units, "over units");
    CheckReduce(op, data({3, 16, 5}), &units, "16 over a strided axis");
    CheckReduce(op, data({7, 33}), &inner, "33 innermost");
    CheckReduce(op, data({2, 9, 7, 3}), &two, "two axes, 63 each");
  }
}

TEST(CudaTensorReduce, EmptyReducedAxis) {
  KAIWU_REQUIRE_CUDA();
  Tensor x(DType::kFloat32, {3, 0, 2});
  std::vector<int64_t> one = {1};
  // Max, Min, LogSum and LogSumExp give infinities, which the comparison does not take.
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2",
                         "ReduceSumSquare"})
    CheckReduce(op, x, &one, "over an empty axis");
}

TEST(CudaTensorReduce, Int64) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(19);
  Tensor x = RandomOf(DType::kInt64, {4, 3, 5}, rng);
  std::vector<int64_t> one = {1}, all = {0, 1, 2};
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL1"}) {
    CheckReduce(op, x, &one, "int64 axis 1");
    CheckReduce(op, x, &all, "int64 all axes");
    CheckReduce(op, RandomOf(DType::kInt64, {2, 300}, rng), &one, "int64 long");
  }
}

TEST(CudaTensorReduce, UnsupportedDtypeThrows) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(20);
  ExpectError([&] { RunNodeCuda(MakeNode("ReduceMax", 1, 1), {RandomOf(DType::kUInt8, {4, 5}, rng)}); },
              StatusCode::kUnsupported, "ReduceMax on uint8");
}

TEST(CudaTensorReduce, ArgMaxArgMin) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(21);
  Tensor x = RandomOf(DType::kFloat32, {4, 6, 7}, rng);
  Tensor xi = RandomOf(DType::kInt64, {30, 4, 3}, rng);  // ties
  for (const char* op : {"ArgMax", "ArgMin"})
    for (int keepdims : {0, 1})
      for (int last : {0, 1})
        for (int64_t axis : {0, 1, -1}) {
          Node node = MakeNode(op, 1, 1, {{"axis", IntAttr(axis)}, {"keepdims", IntAttr(keepdims)},
                                          {"select_last_index", IntAttr(last)}});
          std::string what = std::string(op) + " axis " + std::to_string(axis) + " keepdims " +
                             std::to_string(keepdims) + " last " + std::to_string(last);
          ExpectExact(node, {x}, {}, what);
          ExpectExact(node, {xi}, {}, what + " int64");
        }
  ExpectExact(MakeNode("ArgMax", 1, 1), {RandomOf(DType::kFloat32, {1000}, rng)}, {}, "rank 1");
}

}  // namespace
}  // namespace testing
}  // namespace kaiwu
