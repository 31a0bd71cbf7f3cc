// CUDA Conv, pools and normalisations against the CPU kernels on the same
// random inputs. Float tolerances: rtol 1e-4, atol 1e-4 where sums are
// involved (Conv's GEMM sums in another order; the averages and the norms);
// exact for the max pools and MaxPool's indices.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "cuda_harness.h"

namespace kaiwu {
namespace testing {
namespace {

constexpr float kRtol = 1e-4f, kAtol = 1e-4f;

// Runs `node` on the CPU and on CUDA and compares every output.
void ExpectCudaMatchesCpu(const Node& node, const std::vector<Tensor>& inputs, float rtol,
                          float atol, const std::string& what) {
  std::vector<Tensor> want = RunNode(node, inputs);
  std::vector<Tensor> got = RunNodeCuda(node, inputs);
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ExpectTensorsClose(got[i], want[i], rtol, atol, what + " output " + std::to_string(i));
}

// Expects RunNodeCuda to reject the node with kUnsupported.
void ExpectUnsupported(const Node& node, const std::vector<Tensor>& inputs,
                       const std::string& what) {
  ExpectCudaError(node, inputs, StatusCode::kUnsupported, what);
}

struct ConvCase {
  std::string name;
  Shape x, w;
  std::map<std::string, Attribute> attrs;
  bool bias = true;
};

// Sets KAIWU_CUDNN for the scope: "1" lets Conv use cuDNN (when built in).
class ScopedCudnnEnv {
 public:
  explicit ScopedCudnnEnv(const char* value) {
    const char* old = std::getenv("KAIWU_CUDNN");
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value)
      setenv("KAIWU_CUDNN", value, 1);
    else
      unsetenv("KAIWU_CUDNN");
  }
  ~ScopedCudnnEnv() {
    if (had_)
      setenv("KAIWU_CUDNN", old_.c_str(), 1);
    else
      unsetenv("KAIWU_CUDNN");
  }

 private:
  bool had_ = false;
  std::string old_;
};

// Each case runs on both Conv paths: cuDNN (KAIWU_CUDNN=1, when built in;
// im2col otherwise) and the default, im2col + cuBLAS.
void RunConvCases(const std::vector<ConvCase>& cases, uint32_t seed) {
  for (const char* env : {"1", static_cast<const char*>(nullptr)}) {
    ScopedCudnnEnv scoped(env);
    const std::string path = env ? " (KAIWU_CUDNN=1)" : " (default: im2col)";
    std::mt19937 rng(seed);
    for (const ConvCase& c : cases) {
      Tensor x = RandomTensor(c.x, rng), w = RandomTensor(c.w, rng);
      std::vector<Tensor> ins = {x, w};
      if (c.bias) ins.push_back(RandomTensor({c.w[0]}, rng));
      Node node = MakeNode("Conv", static_cast<int>(ins.size()), 1, c.attrs);
      ExpectCudaMatchesCpu(node, ins, kRtol, kAtol, "Conv " + c.name + path);
    }
  }
}

// Which convs cuDNN takes: with KAIWU_CUDNN=1, symmetric pads, not pointwise.
TEST(CudaConv, CudnnPathSelection) {
  KAIWU_REQUIRE_CUDA();
  auto needs = [](const Shape& x, const Shape& w, const std::map<std::string, Attribute>& attrs) {
    Node node = MakeNode("Conv", 2, 1, attrs);
    PrepareContext ctx(node);
    for (const Shape& s : {x, w}) {
      TensorInfo t;
      t.present = true;
      t.dtype = DType::kFloat32;
      t.shape = s;
      ctx.inputs.push_back(t);
    }
    InferOp(ctx);
    PrepareKernel(CudaKernels(), "CUDA", ctx);
    return (ctx.device_needs & kNeedDnnHandle) != 0;
  };
  const auto pads1 = IntsAttr({1, 1, 1, 1});
  {
    ScopedCudnnEnv scoped("1");
    const bool dnn = cuda::DnnEnabled();
#if KAIWU_WITH_CUDNN
    EXPECT_TRUE(dnn);
#else
    EXPECT_FALSE(dnn);
#endif
    EXPECT_EQ(needs({4, 3, 16, 16}, {8, 3, 3, 3}, {{"pads", pads1}}), dnn) << "3x3 pad 1";
    EXPECT_EQ(needs({4, 6, 9, 9}, {6, 1, 3, 3}, {{"group", IntAttr(6)}}), dnn) << "depthwise";
    EXPECT_FALSE(needs({4, 3, 9, 8}, {4, 3, 3, 2}, {{"pads", IntsAttr({0, 1, 2, 0})}})) << "asymmetric pads";
    EXPECT_FALSE(needs({4, 8, 5, 5}, {6, 8, 1, 1}, {})) << "pointwise";
  }
  for (const char* off : {static_cast<const char*>(nullptr), "0"}) {
    ScopedCudnnEnv scoped(off);
    EXPECT_FALSE(cuda::DnnEnabled());
    EXPECT_FALSE(needs({4, 3, 16, 16}, {8, 3, 3, 3}, {{"pads", pads1}})) << "KAIWU_CUDNN unset or 0";
  }
}

TEST(CudaConv, Conv2D) {
  KAIWU_REQUIRE_CUDA();
  const auto pads1 = IntsAttr({1, 1, 1, 1});
  RunConvCases(
      {
          {"impala 3x3 pad 1", {5, 3, 64, 64}, {16, 3, 3, 3},
           {{"pads", pads1}, {"kernel_shape", IntsAttr({3, 3})}}},
          {"impala no bias", {5, 3, 64, 64}, {16, 3, 3, 3}, {{"pads", pads1}}, false},
          {"1x1 pointwise", {2, 8, 9, 7}, {6, 8, 1, 1}, {}},
          {"1x1 pointwise no bias", {3, 5, 4, 6}, {7, 5, 1, 1}, {}, false},
          {"1x1 stride 2", {2, 8, 9, 7}, {6, 8, 1, 1}, {{"strides", IntsAttr({2, 2})}}},
          {"1x1 pad 1", {2, 4, 5, 6}, {3, 4, 1, 1}, {{"pads", pads1}}},
          {"stride 2", {3, 4, 11, 10}, {5, 4, 3, 3},
           {{"strides", IntsAttr({2, 2})}, {"pads", pads1}}},
          {"stride 2x1 no pad", {2, 3, 12, 9}, {4, 3, 3, 2}, {{"strides", IntsAttr({2, 1})}}},
          {"dilation 2", {2, 3, 12, 13}, {4, 3, 3, 3},
           {{"dilations", IntsAttr({2, 2})}, {"pads", IntsAttr({2, 2, 2, 2})}}},
          {"dilation 2x3 stride 2", {2, 3, 15, 16}, {4, 3, 3, 3},
           {{"dilations", IntsAttr({2, 3})}, {"strides", IntsAttr({2, 2})}}},
          {"groups 2", {2, 6, 10, 9}, {4, 3, 3, 3}, {{"group", IntAttr(2)}, {"pads", pads1}}},
          {"groups 3 no bias", {2, 6, 7, 8}, {9, 2, 3, 3}, {{"group", IntAttr(3)}}, false},
          {"groups 2 pointwise", {2, 8, 5, 5}, {6, 4, 1, 1}, {{"group", IntAttr(2)}}},
          {"depthwise", {2, 8, 10, 10}, {8, 1, 3, 3}, {{"group", IntAttr(8)}, {"pads", pads1}}},
          {"depthwise multiplier 2 stride 2", {2, 8, 10, 11}, {16, 1, 3, 3},
           {{"group", IntAttr(8)}, {"pads", pads1}, {"strides", IntsAttr({2, 2})}}},
          {"asymmetric pads", {2, 3, 9, 8}, {4, 3, 3, 2}, {{"pads", IntsAttr({0, 1, 2, 0})}}},
          {"auto_pad SAME_UPPER", {2, 3, 9, 8}, {4, 3, 3, 3},
           {{"auto_pad", StrAttr("SAME_UPPER")}}},
          {"auto_pad SAME_UPPER stride 2", {2, 3, 9, 8}, {4, 3, 4, 4},
           {{"auto_pad", StrAttr("SAME_UPPER")}, {"strides", IntsAttr({2, 2})}}},
          {"auto_pad SAME_LOWER stride 2", {2, 3, 9, 8}, {4, 3, 4, 4},
           {{"auto_pad", StrAttr("SAME_LOWER")}, {"strides", IntsAttr({2, 2})}}},
          {"auto_pad VALID", {2, 3, 9, 8}, {4, 3, 3, 3},
           {{"auto_pad", StrAttr("VALID")}, {"pads", IntsAttr({1, 1, 1, 1})}}},
          {"kernel as large as the input", {3, 2, 5, 4}, {3, 2, 5, 4}, {}},
      },
      11);
}

TEST(CudaConv, Conv1D) {
  KAIWU_REQUIRE_CUDA();
  RunConvCases(
      {
          {"1-D pad", {3, 4, 17}, {5, 4, 3}, {{"pads", IntsAttr({1, 2})}}},
          {"1-D stride 2 dilation 2", {3, 4, 17}, {5, 4, 3},
           {{"strides", IntsAttr({2})}, {"dilations", IntsAttr({2})}}, false},
          {"1-D pointwise", {2, 6, 13}, {4, 6, 1}, {}},
          {"1-D depthwise", {2, 6, 13}, {6, 1, 5},
           {{"group", IntAttr(6)}, {"pads", IntsAttr({2, 2})}}},
          {"1-D SAME_UPPER", {2, 3, 10}, {4, 3, 4}, {{"auto_pad", StrAttr("SAME_UPPER")}}},
      },
      12);
}

TEST(CudaConv, FusedActivation) {
  KAIWU_REQUIRE_CUDA();
  const auto pads1 = IntsAttr({1, 1, 1, 1});
  RunConvCases(
      {
          {"impala + Relu", {5, 3, 64, 64}, {16, 3, 3, 3},
           {{"pads", pads1}, {"_kaiwu_act", StrAttr("Relu")}}},
          {"no bias + Relu", {2, 4, 8, 8}, {6, 4, 3, 3},
           {{"pads", pads1}, {"_kaiwu_act", StrAttr("Relu")}}, false},
          {"pointwise + Relu", {2, 8, 6, 6}, {5, 8, 1, 1}, {{"_kaiwu_act", StrAttr("Relu")}}},
          {"depthwise + LeakyRelu", {2, 4, 7, 7}, {4, 1, 3, 3},
           {{"group", IntAttr(4)},
            {"pads", pads1},
            {"_kaiwu_act", StrAttr("LeakyRelu")},
            {"_kaiwu_act_params", FloatsAttr({0.1f, 0.f})}}},
          {"Clip", {2, 3, 8, 8}, {4, 3, 3, 3},
           {{"_kaiwu_act", StrAttr("Clip")}, {"_kaiwu_act_params", FloatsAttr({-0.5f, 0.5f})}}},
          {"Sigmoid", {2, 3, 8, 8}, {4, 3, 3, 3}, {{"_kaiwu_act", StrAttr("Sigmoid")}}},
          {"1-D + Tanh", {2, 3, 11}, {4, 3, 3}, {{"_kaiwu_act", StrAttr("Tanh")}}},
      },
      13);
}

// 60 images of 16 x 9 x 4096 im2col floats each exceed the 128 MiB scratch
// bound: on the im2col path the batch runs in two chunks (56 + 4 images).
TEST(CudaConv, BatchInChunks) {
  KAIWU_REQUIRE_CUDA();
  RunConvCases({{"chunked batch", {60, 16, 64, 64}, {8, 16, 3, 3},
                 {{"pads", IntsAttr({1, 1, 1, 1})}, {"_kaiwu_act", StrAttr("Relu")}}}},
               14);
}

TEST(CudaConv, Conv3DIsUnsupported) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(15);
  Tensor x = RandomTensor({1, 2, 4, 4, 4}, rng), w = RandomTensor({2, 2, 3, 3, 3}, rng);
  ExpectUnsupported(MakeNode("Conv", 2, 1), {x, w}, "3-D Conv");
}

struct PoolCase {
  std::string name;
  Shape x;
  std::map<std::string, Attribute> attrs;
};

// MaxPool compares exactly, AveragePool to kRtol / kAtol.
void RunPoolCases(const std::string& op, const std::vector<PoolCase>& cases, uint32_t seed) {
  const bool exact = op == "MaxPool";
  std::mt19937 rng(seed);
  for (const PoolCase& c : cases) {
    Tensor x = RandomTensor(c.x, rng);
    ExpectCudaMatchesCpu(MakeNode(op, 1, 1, c.attrs), {x}, exact ? 0.f : kRtol,
                         exact ? 0.f : kAtol, op + " " + c.name);
  }
}

std::vector<PoolCase> WindowCases() {
  return {
      {"impala 3x3 stride 2 pad 1", {5, 16, 64, 64},
       {{"kernel_shape", IntsAttr({3, 3})},
        {"strides", IntsAttr({2, 2})},
        {"pads", IntsAttr({1, 1, 1, 1})}}},
      {"2x2 default stride", {2, 3, 7, 9}, {{"kernel_shape", IntsAttr({2, 2})}}},
      {"ceil_mode", {2, 3, 10, 11},
       {{"kernel_shape", IntsAttr({3, 3})},
        {"strides", IntsAttr({2, 2})},
        {"ceil_mode", IntAttr(1)}}},
      {"ceil_mode pad 1", {2, 3, 10, 11},
       {{"kernel_shape", IntsAttr({3, 3})},
        {"strides", IntsAttr({2, 2})},
        {"pads", IntsAttr({1, 1, 1, 1})},
        {"ceil_mode", IntAttr(1)}}},
      {"dilations", {2, 3, 12, 13},
       {{"kernel_shape", IntsAttr({2, 3})},
        {"dilations", IntsAttr({2, 2})},
        {"pads", IntsAttr({1, 1, 1, 1})}}},
      {"asymmetric pads", {2, 3, 8, 9},
       {{"kernel_shape", IntsAttr({3, 3})}, {"pads", IntsAttr({0, 2, 1, 0})}}},
      {"auto_pad SAME_UPPER stride 2", {2, 3, 9, 8},
       {{"kernel_shape", IntsAttr({3, 3})},
        {"strides", IntsAttr({2, 2})},
        {"auto_pad", StrAttr("SAME_UPPER")}}},
      {"1-D", {3, 4, 19},
       {{"kernel_shape", IntsAttr({3})}, {"strides", IntsAttr({2})}, {"pads", IntsAttr({1, 1})}}},
      {"1-D ceil_mode dilation 2", {3, 4, 20},
       {{"kernel_shape", IntsAttr({3})},
        {"strides", IntsAttr({3})},
        {"dilations", IntsAttr({2})},
        {"ceil_mode", IntAttr(1)}}},
      {"3-D", {2, 3, 5, 6, 7},
       {{"kernel_shape", IntsAttr({2, 3, 3})},
        {"strides", IntsAttr({1, 2, 2})},
        {"pads", IntsAttr({0, 1, 1, 1, 0, 1})}}},
  };
}

TEST(CudaPool, MaxPool) {
  KAIWU_REQUIRE_CUDA();
  RunPoolCases("MaxPool", WindowCases(), 21);
}

TEST(CudaPool, AveragePool) {
  KAIWU_REQUIRE_CUDA();
  for (int64_t include_pad : {0, 1}) {
    std::vector<PoolCase> cases = WindowCases();
    for (PoolCase& c : cases) {
      c.attrs["count_include_pad"] = IntAttr(include_pad);
      c.name += " count_include_pad " + std::to_string(include_pad);
    }
    RunPoolCases("AveragePool", cases, 22);
  }
}

// NaN inputs are skipped as on the CPU; a window of NaNs alone gives -inf.
TEST(CudaPool, MaxPoolNaN) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(23);
  Tensor x = RandomTensor({2, 3, 9, 10}, rng);
  float* v = x.As<float>();
  for (int64_t i = 0; i < x.size(); i += 7) v[i] = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = 0; i < 3 * 10; ++i) v[i] = std::numeric_limits<float>::quiet_NaN();
  Node node = MakeNode("MaxPool", 1, 1,
                       {{"kernel_shape", IntsAttr({2, 2})}, {"strides", IntsAttr({2, 2})}});
  ExpectCudaMatchesCpu(node, {x}, 0.f, 0.f, "MaxPool with NaN");
}

TEST(CudaPool, MaxPoolIndices) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(24);
  for (int64_t order : {0, 1}) {
    for (const PoolCase& c : WindowCases()) {
      std::map<std::string, Attribute> attrs = c.attrs;
      attrs["storage_order"] = IntAttr(order);
      Tensor x = RandomTensor(c.x, rng);
      ExpectCudaMatchesCpu(MakeNode("MaxPool", 1, 2, attrs), {x}, 0.f, 0.f,
                           "MaxPool indices " + c.name + " storage_order " + std::to_string(order));
    }
  }
}

TEST(CudaPool, GlobalPools) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(25);
  for (const Shape& s : {Shape{3, 5, 7, 9}, Shape{2, 4, 1000}, Shape{2, 3, 4, 5, 6},
                         Shape{5, 16, 64, 64}, Shape{1, 2, 1, 1}}) {
    Tensor x = RandomTensor(s, rng);
    ExpectCudaMatchesCpu(MakeNode("GlobalMaxPool", 1, 1), {x}, 0.f, 0.f,
                         "GlobalMaxPool " + ShapeToString(s));
    ExpectCudaMatchesCpu(MakeNode("GlobalAveragePool", 1, 1), {x}, kRtol, kAtol,
                         "GlobalAveragePool " + ShapeToString(s));
  }
}

TEST(CudaPool, NonFloatIsUnsupported) {
  KAIWU_REQUIRE_CUDA();
  Tensor x(DType::kUInt8, {1, 1, 4, 4});
  for (int64_t i = 0; i < x.size(); ++i) x.As<uint8_t>()[i] = static_cast<uint8_t>(i * 7);
  ExpectUnsupported(MakeNode("MaxPool", 1, 1, {{"kernel_shape", IntsAttr({2, 2})}}), {x},
                    "uint8 MaxPool");
}

TEST(CudaNorm, BatchNormalization) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(31);
  for (const Shape& s : {Shape{4, 6, 5, 7}, Shape{8, 6}, Shape{3, 5, 11}, Shape{2, 3, 2, 3, 4}}) {
    const int64_t c = s[1];
    std::vector<Tensor> ins = {RandomTensor(s, rng, -2.f, 3.f), RandomTensor({c}, rng),
                               RandomTensor({c}, rng), RandomTensor({c}, rng),
                               RandomTensor({c}, rng, 0.5f, 2.f)};
    Node node = MakeNode("BatchNormalization", 5, 1, {{"epsilon", FloatAttr(1e-3f)}});
    ExpectCudaMatchesCpu(node, ins, kRtol, kAtol, "BatchNormalization " + ShapeToString(s));
  }
}

TEST(CudaNorm, InstanceNormalization) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(32);
  for (const Shape& s : {Shape{3, 5, 9, 11}, Shape{2, 4, 300}, Shape{2, 3, 4, 5, 6}}) {
    const int64_t c = s[1];
    std::vector<Tensor> ins = {RandomTensor(s, rng, -2.f, 3.f), RandomTensor({c}, rng),
                               RandomTensor({c}, rng)};
    Node node = MakeNode("InstanceNormalization", 3, 1, {{"epsilon", FloatAttr(1e-4f)}});
    ExpectCudaMatchesCpu(node, ins, kRtol, kAtol, "InstanceNormalization " + ShapeToString(s));
  }
}

TEST(CudaNorm, LayerNormalization) {
  KAIWU_REQUIRE_CUDA();
  struct LnCase {
    Shape x;
    int64_t axis;
    Shape scale;
    bool bias;
  };
  std::mt19937 rng(33);
  for (const LnCase& c : std::vector<LnCase>{{{4, 16}, -1, {16}, true},
                                             {{2, 3, 8}, -1, {8}, false},
                                             {{2, 3, 8}, 1, {3, 8}, true},
                                             {{2, 3, 8}, 1, {8}, true},
                                             {{3, 5}, 0, {3, 5}, true},
                                             {{2, 4, 3}, -2, {1, 3}, true},
                                             {{64, 300}, -1, {300}, true},
                                             // Each register width of the short-row kernel, its
                                             // edges, and the long-row one past 512.
                                             {{1031, 64}, -1, {64}, true},
                                             {{5, 7, 100}, -1, {100}, false},
                                             {{9, 512}, -1, {512}, true},
                                             {{3, 513}, -1, {513}, true},
                                             {{6, 1}, -1, {1}, true},
                                             {{7, 32}, -1, {32}, true},
                                             {{7, 2, 129}, -1, {129}, true},
                                             {{3, 2, 3000}, -1, {3000}, false}}) {
    std::vector<Tensor> ins = {RandomTensor(c.x, rng, -2.f, 3.f), RandomTensor(c.scale, rng)};
    if (c.bias) ins.push_back(RandomTensor(c.scale, rng));
    const std::map<std::string, Attribute> attrs = {{"axis", IntAttr(c.axis)},
                                                    {"epsilon", FloatAttr(1e-4f)}};
    const std::string what = "LayerNormalization " + ShapeToString(c.x) + " axis " +
                             std::to_string(c.axis) + " scale " + ShapeToString(c.scale);
    const int num_inputs = static_cast<int>(ins.size());
    ExpectCudaMatchesCpu(MakeNode("LayerNormalization", num_inputs, 3, attrs), ins, kRtol, kAtol,
                         what + " with Mean and InvStdDev");
    ExpectCudaMatchesCpu(MakeNode("LayerNormalization", num_inputs, 1, attrs), ins, kRtol, kAtol,
                         what + " (Y only)");
  }
}

}  // namespace
}  // namespace testing
}  // namespace kaiwu
