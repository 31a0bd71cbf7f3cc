// CUDA Resize against the CPU kernel on the same random inputs: nearest with
// every nearest_mode (float32 and integer data), linear and cubic with every
// coordinate_transformation_mode, cubic_coeff_a and exclude_outside, up- and
// downsampling, sizes with axes and keep_aspect_ratio_policy, resizes of every
// axis (1-D to 5-D) and of the spatial axes only, tf_crop_and_resize with an
// roi reaching outside the input, float64, an empty output, and the
// unsupported variant. Tolerances: exact for nearest (a gather); rtol 1e-4,
// atol 1e-5 for linear and cubic (the same taps, weights and order of
// summation as the CPU, but the GPU contracts multiply-adds into FMAs).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "cuda_harness.h"

namespace kaiwu {
namespace testing {
namespace {

constexpr float kRtol = 1e-4f, kAtol = 1e-5f;

// Resize's shape operands; an empty vector omits the input.
struct Operands {
  std::vector<float> roi, scales;
  std::vector<int64_t> sizes;
};

std::vector<Tensor> ResizeInputs(const Tensor& x, const Operands& op) {
  auto floats = [](const std::vector<float>& v) {
    return v.empty() ? Tensor() : MakeTensor<float>({static_cast<int64_t>(v.size())}, v);
  };
  Tensor sizes = op.sizes.empty()
                     ? Tensor()
                     : MakeTensor<int64_t>({static_cast<int64_t>(op.sizes.size())}, op.sizes);
  return {x, floats(op.roi), floats(op.scales), sizes};
}

Node ResizeNode(std::map<std::string, Attribute> attrs) {
  return MakeNode("Resize", 4, 1, std::move(attrs));
}

// Runs `node` on the CPU and on CUDA (roi, scales and sizes known at Prepare)
// and compares the outputs.
void ExpectCudaMatchesCpu(const Node& node, const std::vector<Tensor>& inputs, float rtol,
                          float atol, const std::string& what) {
  std::vector<Tensor> want = RunNode(node, inputs);
  std::vector<Tensor> got = RunNodeCuda(node, inputs, {1, 2, 3});
  ASSERT_EQ(got.size(), 1u) << what;
  ExpectTensorsClose(got[0], want[0], rtol, atol, what);
}

template <typename T>
Tensor RandomIntegers(Shape shape, std::mt19937& rng) {
  std::uniform_int_distribution<int> dist(-100, 100);
  std::vector<T> v(static_cast<size_t>(NumElements(shape)));
  for (T& e : v) e = static_cast<T>(dist(rng));
  return MakeTensor<T>(std::move(shape), v);
}

Tensor RandomDoubles(Shape shape, std::mt19937& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(static_cast<size_t>(NumElements(shape)));
  for (double& e : v) e = dist(rng);
  return MakeTensor<double>(std::move(shape), v);
}

const char* const kNearestModes[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
const char* const kCoordModes[] = {"half_pixel",    "half_pixel_symmetric", "pytorch_half_pixel",
                                   "align_corners", "asymmetric",           "tf_half_pixel_for_nn"};

TEST(CudaResize, NearestEveryModeFloat) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(1);
  Tensor x = RandomTensor({2, 3, 5, 7}, rng);
  const std::vector<std::vector<float>> scales = {
      {1, 1, 2, 2},       // upsample x2 (asymmetric hits the .5 ties)
      {1, 1, 1.5f, 2.5f},  // fractional
      {1, 1, 0.5f, 0.6f},  // downsample
  };
  for (const char* nearest : kNearestModes)
    for (const char* coord : kCoordModes)
      for (const std::vector<float>& s : scales) {
        Node node = ResizeNode({{"mode", StrAttr("nearest")},
                                {"nearest_mode", StrAttr(nearest)},
                                {"coordinate_transformation_mode", StrAttr(coord)}});
        ExpectCudaMatchesCpu(node, ResizeInputs(x, {{}, s, {}}), 0.f, 0.f,
                             std::string("nearest ") + nearest + " " + coord + " scale " +
                                 std::to_string(s[2]));
      }
}

TEST(CudaResize, NearestIntegers) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(2);
  const Operands up = {{}, {1, 1, 2, 3}, {}}, down = {{}, {}, {1, 2, 3, 2}};
  for (const char* nearest : kNearestModes) {
    Node node = ResizeNode({{"mode", StrAttr("nearest")},
                            {"nearest_mode", StrAttr(nearest)},
                            {"coordinate_transformation_mode", StrAttr("asymmetric")}});
    const std::string what = std::string("nearest ") + nearest;
    for (const Operands& op : {up, down}) {
      ExpectCudaMatchesCpu(node, ResizeInputs(RandomIntegers<uint8_t>({1, 2, 5, 4}, rng), op),
                           0.f, 0.f, what + " uint8");
      ExpectCudaMatchesCpu(node, ResizeInputs(RandomIntegers<int16_t>({1, 2, 5, 4}, rng), op),
                           0.f, 0.f, what + " int16");
      ExpectCudaMatchesCpu(node, ResizeInputs(RandomIntegers<int32_t>({1, 2, 5, 4}, rng), op),
                           0.f, 0.f, what + " int32");
      ExpectCudaMatchesCpu(node, ResizeInputs(RandomIntegers<int64_t>({1, 2, 5, 4}, rng), op),
                           0.f, 0.f, what + " int64");
    }
  }
}

// Bilinear on NCHW with sizes and with scales: the CPU's one-pass bilinear rows.
TEST(CudaResize, LinearEveryCoordinateMode) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(3);
  struct Case {
    Shape x;
    Operands op;
    std::string what;
  };
  const std::vector<Case> cases = {
      {{2, 3, 5, 7}, {{}, {}, {2, 3, 9, 13}}, "upsample"},
      {{1, 2, 12, 10}, {{}, {}, {1, 2, 5, 4}}, "downsample"},
      {{1, 2, 4, 6}, {{}, {}, {1, 2, 1, 9}}, "to one row"},
      {{2, 2, 6, 5}, {{}, {1, 1, 2, 2}, {}}, "scales x2"},
      {{1, 3, 9, 11}, {{}, {1, 1, 0.5f, 0.75f}, {}}, "scales down"},
  };
  for (const char* coord : kCoordModes)
    for (const Case& c : cases) {
      Node node = ResizeNode(
          {{"mode", StrAttr("linear")}, {"coordinate_transformation_mode", StrAttr(coord)}});
      ExpectCudaMatchesCpu(node, ResizeInputs(RandomTensor(c.x, rng), c.op), kRtol, kAtol,
                           std::string("linear ") + coord + " " + c.what);
    }
}

TEST(CudaResize, CubicEveryCoordinateMode) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(4);
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3, 5, 7}, {2, 3, 9, 13}},   // upsample
      {{1, 2, 12, 10}, {1, 2, 5, 4}},  // downsample
      {{1, 1, 3, 2}, {1, 1, 7, 5}},    // taps beyond both edges
  };
  for (const char* coord : kCoordModes)
    for (float a : {-0.75f, -0.5f})
      for (int exclude : {0, 1})
        for (const auto& [in, out] : shapes) {
          Node node = ResizeNode({{"mode", StrAttr("cubic")},
                                  {"coordinate_transformation_mode", StrAttr(coord)},
                                  {"cubic_coeff_a", FloatAttr(a)},
                                  {"exclude_outside", IntAttr(exclude)}});
          ExpectCudaMatchesCpu(node, ResizeInputs(RandomTensor(in, rng), {{}, {}, out}), kRtol,
                               kAtol,
                               std::string("cubic ") + coord + " a " + std::to_string(a) +
                                   " exclude_outside " + std::to_string(exclude) + " to " +
                                   ShapeToString(out));
        }
}

// Sizes or scales for some axes only (opset 18 `axes`, negative too) and the
// keep_aspect_ratio_policy values.
TEST(CudaResize, AxesAndAspectRatioPolicies) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(5);
  Tensor x = RandomTensor({1, 3, 6, 8}, rng);
  for (const char* policy : {"stretch", "not_larger", "not_smaller"})
    for (const char* mode : {"nearest", "linear"}) {
      Node node = ResizeNode({{"mode", StrAttr(mode)},
                              {"axes", IntsAttr({2, 3})},
                              {"keep_aspect_ratio_policy", StrAttr(policy)}});
      ExpectCudaMatchesCpu(node, ResizeInputs(x, {{}, {}, {5, 13}}), kRtol, kAtol,
                           std::string(mode) + " sizes, policy " + policy);
    }
  Node negative = ResizeNode({{"mode", StrAttr("linear")}, {"axes", IntsAttr({-1, -2})}});
  ExpectCudaMatchesCpu(negative, ResizeInputs(x, {{}, {}, {11, 4}}), kRtol, kAtol,
                       "linear sizes, axes -1 -2");
  Node scales = ResizeNode({{"mode", StrAttr("cubic")}, {"axes", IntsAttr({2, 3})}});
  ExpectCudaMatchesCpu(scales, ResizeInputs(x, {{}, {2.f, 0.5f}, {}}), kRtol, kAtol,
                       "cubic scales, axes 2 3");
}

// Every axis resized (N and C too: several source rows per output row), a
// single resized outer axis, 1-D, 3-D and 5-D inputs.
TEST(CudaResize, EveryAxisAndOtherRanks) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(6);
  struct Case {
    std::string mode;
    Shape x;
    Operands op;
  };
  const std::vector<Case> cases = {
      {"linear", {3, 4, 5, 6}, {{}, {2, 0.5f, 1.5f, 2}, {}}},  // 8 source rows
      {"linear", {4, 5, 6}, {{}, {}, {7, 3, 11}}},
      {"cubic", {3, 5, 6}, {{}, {}, {4, 8, 9}}},                  // 16 source rows
      {"linear", {1, 2, 3, 4, 5}, {{}, {}, {1, 2, 6, 7, 9}}},     // trilinear
      {"linear", {6, 8}, {{}, {}, {11, 8}}},                      // last axis untouched
      {"cubic", {6, 8}, {{}, {}, {4, 8}}},
      {"linear", {17}, {{}, {}, {40}}},
      {"cubic", {17}, {{}, {}, {9}}},
      {"nearest", {17}, {{}, {}, {40}}},
      {"nearest", {2, 3, 4, 5, 6}, {{}, {}, {3, 2, 7, 5, 11}}},
      {"linear", {2, 3, 4, 5}, {{}, {1, 1, 1, 1}, {}}},          // every axis the identity
  };
  for (const Case& c : cases) {
    Node node = ResizeNode({{"mode", StrAttr(c.mode)}});
    const bool exact = c.mode == "nearest";
    ExpectCudaMatchesCpu(node, ResizeInputs(RandomTensor(c.x, rng), c.op), exact ? 0.f : kRtol,
                         exact ? 0.f : kAtol, c.mode + " " + ShapeToString(c.x));
  }
}

// roi reaching outside [0, 1]: those outputs take extrapolation_value.
TEST(CudaResize, TfCropAndResize) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(7);
  Tensor x = RandomTensor({1, 2, 6, 7}, rng);
  const Operands all_axes = {{0, 0, 0.2f, -0.1f, 1, 1, 0.9f, 1.2f}, {}, {1, 2, 5, 9}};
  for (const char* mode : {"nearest", "linear", "cubic"}) {
    Node node = ResizeNode({{"mode", StrAttr(mode)},
                            {"coordinate_transformation_mode", StrAttr("tf_crop_and_resize")},
                            {"extrapolation_value", FloatAttr(0.5f)}});
    ExpectCudaMatchesCpu(node, ResizeInputs(x, all_axes), kRtol, kAtol,
                         std::string("tf_crop_and_resize ") + mode);
    Node spatial = ResizeNode({{"mode", StrAttr(mode)},
                               {"coordinate_transformation_mode", StrAttr("tf_crop_and_resize")},
                               {"axes", IntsAttr({2, 3})}});
    ExpectCudaMatchesCpu(spatial, ResizeInputs(x, {{-0.3f, 0.1f, 0.8f, 1.1f}, {}, {7, 4}}), kRtol,
                         kAtol, std::string("tf_crop_and_resize axes 2 3 ") + mode);
  }
}

// float64 sums (ExpectTensorsClose compares other dtypes bit for bit).
TEST(CudaResize, Float64) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(8);
  Tensor x = RandomDoubles({2, 3, 5, 7}, rng);
  for (const char* mode : {"linear", "cubic"}) {
    Node node = ResizeNode({{"mode", StrAttr(mode)}});
    std::vector<Tensor> inputs = ResizeInputs(x, {{}, {}, {2, 3, 9, 4}});
    Tensor want = RunNode(node, inputs)[0];
    Tensor got = RunNodeCuda(node, inputs, {1, 2, 3})[0];
    ASSERT_EQ(got.dtype(), DType::kFloat64) << mode;
    ASSERT_EQ(got.shape(), want.shape()) << mode;
    for (int64_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got.As<double>()[i], want.As<double>()[i],
                  1e-12 + 1e-10 * std::fabs(want.As<double>()[i]))
          << mode << " at " << i;
  }
}

TEST(CudaResize, EmptyOutput) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(9);
  for (const char* mode : {"nearest", "linear"}) {
    Node node = ResizeNode({{"mode", StrAttr(mode)}});
    ExpectCudaMatchesCpu(node, ResizeInputs(RandomTensor({1, 2, 3, 4}, rng), {{}, {}, {1, 2, 0, 5}}),
                         0.f, 0.f, std::string("empty ") + mode);
  }
}

// Nearest tf_crop_and_resize of integers: the CPU runs it as float sums.
TEST(CudaResize, UnsupportedVariant) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(10);
  Node node = ResizeNode({{"mode", StrAttr("nearest")},
                          {"coordinate_transformation_mode", StrAttr("tf_crop_and_resize")}});
  std::vector<Tensor> inputs = ResizeInputs(RandomIntegers<int32_t>({1, 1, 4, 4}, rng),
                                            {{0, 0, 0.1f, 0.1f, 1, 1, 0.9f, 1.3f}, {}, {1, 1, 3, 5}});
  ExpectError([&] { RunNodeCuda(node, inputs, {1, 2, 3}); }, StatusCode::kUnsupported,
              "nearest tf_crop_and_resize of int32");
}

}  // namespace
}  // namespace testing
}  // namespace kaiwu
