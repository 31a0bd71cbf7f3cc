// FusedElementwise (domain kaiwu) against a naive per-op reference.
#include <cmath>

#include <gtest/gtest.h>

#include "kernel_harness.h"

namespace kaiwu {
namespace {

using testing::FloatsAttr;
using testing::IntsAttr;
using testing::RandomTensor;
using testing::RunNode;

Attribute StringsAttr(std::vector<std::string> v) {
  Attribute a;
  a.kind = Attribute::Kind::kStrings;
  a.strings = std::move(v);
  return a;
}

Node Fused(int num_inputs, std::vector<std::string> ops, std::vector<int64_t> operand,
           std::vector<int64_t> swapped, std::vector<float> params) {
  Node n = testing::MakeNode("FusedElementwise", num_inputs, 1,
                             {{"ops", StringsAttr(std::move(ops))},
                              {"operand", IntsAttr(std::move(operand))},
                              {"swapped", IntsAttr(std::move(swapped))},
                              {"params", FloatsAttr(std::move(params))}});
  n.domain = "kaiwu";
  return n;
}

// ((1 - relu(x * s[c] + b)) / 2) clipped to [-0.3, 0.4], tanh, leaky relu (0.2), sigmoid.
float Reference(float x, float s, float b) {
  float y = x * s + b;
  y = y > 0 ? y : 0;
  y = 1.f - y;
  y = y / 2.f;
  y = std::min(0.4f, std::max(-0.3f, y));
  y = std::tanh(y);
  y = y < 0 ? 0.2f * y : y;
  return 1.f / (1.f + std::exp(-y));
}

class FusedElementwiseTest : public ::testing::TestWithParam<int> {};

TEST_P(FusedElementwiseTest, MatchesPerOpReference) {
  std::mt19937 rng(7);
  const int threads = GetParam();
  Tensor x = RandomTensor({3, 5, 37, 41}, rng, -2.f, 2.f);
  Tensor s = RandomTensor({5, 1, 1}, rng);
  Tensor b = RandomTensor({1}, rng);
  Tensor one = testing::MakeTensor<float>({}, {1.f});
  Tensor two = testing::MakeTensor<float>({1}, {2.f});
  Node n = Fused(5, {"Mul", "Add", "Relu", "Sub", "Div", "Clip", "Tanh", "LeakyRelu", "Sigmoid"},
                 {1, 2, 0, 3, 4, 0, 0, 0, 0}, {0, 0, 0, 1, 0, 0, 0, 0, 0},
                 {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -0.3f, 0.4f, 0, 0, 0.2f, 0, 0, 0});
  std::vector<Tensor> out = RunNode(n, {x, s, b, one, two}, threads);
  ASSERT_EQ(out[0].shape(), x.shape());
  const int64_t inner = 37 * 41;
  for (int64_t i = 0; i < x.size(); ++i) {
    float want = Reference(x.As<float>()[i], s.As<float>()[(i / inner) % 5], b.As<float>()[0]);
    ASSERT_NEAR(out[0].As<float>()[i], want, 1e-6f) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, FusedElementwiseTest, ::testing::Values(1, 3));

TEST(FusedElementwise, OperandBroadcastsTheOutput) {
  std::mt19937 rng(3);
  Tensor x = RandomTensor({2, 1, 3}, rng);
  Tensor c = RandomTensor({4, 1}, rng);
  std::vector<Tensor> out = RunNode(Fused(2, {"Sub", "Exp"}, {1, 0}, {1, 0}, {0, 0, 0, 0}), {x, c});
  ASSERT_EQ(out[0].shape(), (Shape{2, 4, 3}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k)
        EXPECT_NEAR(out[0].As<float>()[(i * 4 + j) * 3 + k],
                    std::exp(c.As<float>()[j] - x.As<float>()[i * 3 + k]), 1e-5f);
}

TEST(FusedElementwise, BadAttributesAreModelErrors) {
  std::mt19937 rng(1);
  Tensor x = RandomTensor({4}, rng);
  auto code = [&](const Node& n, std::vector<Tensor> in) {
    try {
      RunNode(n, in);
    } catch (const Error& e) {
      return e.code();
    }
    return StatusCode::kOk;
  };
  EXPECT_EQ(code(Fused(1, {"Relu"}, {0, 0}, {0}, {0, 0}), {x}), StatusCode::kModel);      // lengths
  EXPECT_EQ(code(Fused(1, {"Gelu"}, {0}, {0}, {0, 0}), {x}), StatusCode::kModel);         // op
  EXPECT_EQ(code(Fused(1, {"Add"}, {1}, {0}, {0, 0}), {x}), StatusCode::kModel);          // operand
  Tensor i = testing::MakeTensor<int64_t>({4}, {1, 2, 3, 4});
  EXPECT_EQ(code(Fused(1, {"Relu"}, {0}, {0}, {0, 0}), {i}), StatusCode::kModel);         // dtype
}

}  // namespace
}  // namespace kaiwu
