// The CPU kernels of RL policies' hot ops run without heap allocation once
// prepared, with one thread and with a pool (a counter: alloc_counter.h).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backends/cpu/sgemm_packed.h"
#include "kernel_harness.h"

namespace kaiwu {
namespace {

using testing::IntAttr;
using testing::IntsAttr;
using testing::MakeNode;
using testing::RandomTensor;
using testing::RunAllocations;

struct Case {
  std::string name;
  Node node;
  std::vector<Tensor> inputs;
};

std::vector<Case> Cases() {
  std::mt19937 rng(5);
  std::vector<Case> cases;
  {
    const int64_t n = 256, k = 128;
    Node node = MakeNode("PackedGemm", 3, 1, {{"n", IntAttr(n)}});
    node.domain = "kaiwu";
    Tensor packed = RandomTensor({n / 16, k, 16}, rng);
    cases.push_back(
        {"PackedGemm", node, {RandomTensor({256, k}, rng), packed, RandomTensor({1, n}, rng)}});
  }
  cases.push_back({"Gemm", MakeNode("Gemm", 3, 1, {{"transB", IntAttr(1)}}),
                   {RandomTensor({64, 96}, rng), RandomTensor({128, 96}, rng),
                    RandomTensor({128}, rng)}});
  cases.push_back({"MatMul", MakeNode("MatMul", 2, 1),
                   {RandomTensor({8, 32, 64}, rng), RandomTensor({8, 64, 32}, rng)}});
  cases.push_back({"Conv",
                   MakeNode("Conv", 3, 1,
                            {{"kernel_shape", IntsAttr({3, 3})}, {"pads", IntsAttr({1, 1, 1, 1})}}),
                   {RandomTensor({4, 16, 24, 24}, rng), RandomTensor({32, 16, 3, 3}, rng),
                    RandomTensor({32}, rng)}});
  {
    const int64_t h = 64, in = 48, b = 16, t = 3;
    cases.push_back({"LSTM", MakeNode("LSTM", 3, 3, {{"hidden_size", IntAttr(h)}}),
                     {RandomTensor({t, b, in}, rng), RandomTensor({1, 4 * h, in}, rng),
                      RandomTensor({1, 4 * h, h}, rng)}});
    cases.push_back({"GRU",
                     MakeNode("GRU", 3, 2,
                              {{"hidden_size", IntAttr(h)}, {"linear_before_reset", IntAttr(1)}}),
                     {RandomTensor({t, b, in}, rng), RandomTensor({1, 3 * h, in}, rng),
                      RandomTensor({1, 3 * h, h}, rng)}});
  }
  cases.push_back(
      {"Add", MakeNode("Add", 2, 1), {RandomTensor({64, 4096}, rng), RandomTensor({4096}, rng)}});
  cases.push_back({"Relu", MakeNode("Relu", 1, 1), {RandomTensor({64, 4096}, rng)}});
  cases.push_back({"Softmax", MakeNode("Softmax", 1, 1), {RandomTensor({256, 512}, rng)}});
  cases.push_back({"LayerNormalization", MakeNode("LayerNormalization", 3, 1),
                   {RandomTensor({256, 512}, rng), RandomTensor({512}, rng),
                    RandomTensor({512}, rng)}});
  cases.push_back({"MaxPool",
                   MakeNode("MaxPool", 1, 1,
                            {{"kernel_shape", IntsAttr({2, 2})}, {"strides", IntsAttr({2, 2})}}),
                   {RandomTensor({4, 32, 32, 32}, rng)}});
  cases.push_back({"Transpose", MakeNode("Transpose", 1, 1, {{"perm", IntsAttr({0, 2, 3, 1})}}),
                   {RandomTensor({4, 32, 32, 32}, rng)}});
  return cases;
}

TEST(KernelRunAllocations, HotOpsAllocateNothingPerRun) {
  for (const Case& c : Cases())
    for (int threads : {1, 3}) {
      SCOPED_TRACE(c.name + ", " + std::to_string(threads) + " threads");
      EXPECT_EQ(RunAllocations(c.node, c.inputs, threads, 20), 0);
    }
}

}  // namespace
}  // namespace kaiwu
