// CUDA Einsum against the CPU kernel on the same random inputs: the cuBLAS
// fast path (plain, batched, folded batch, transposed A or B), the generic
// kernel (diagonals, traces, permutes, outer and inner products, three inputs,
// broadcast size-1 dims, orders the fast path rejects), an empty operand, and
// the unsupported variants. Tolerance rtol 1e-4, atol 1e-5: float32 sums whose
// order differs; contracted extents stay <= 64 with inputs in [-1, 1).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "cuda_harness.h"

namespace kaiwu {
namespace testing {
namespace {

constexpr float kRtol = 1e-4f, kAtol = 1e-5f;

Node EinsumNode(const std::string& equation, int num_inputs) {
  return MakeNode("Einsum", num_inputs, 1, {{"equation", StrAttr(equation)}});
}

struct Case {
  std::string equation;
  std::vector<Shape> shapes;
};

void ExpectCudaMatchesCpu(const std::vector<Case>& cases, unsigned seed) {
  std::mt19937 rng(seed);
  for (const Case& c : cases) {
    std::vector<Tensor> inputs;
    for (const Shape& s : c.shapes) inputs.push_back(RandomTensor(s, rng));
    const Node node = EinsumNode(c.equation, static_cast<int>(inputs.size()));
    std::vector<Tensor> want = RunNode(node, inputs);
    std::vector<Tensor> got = RunNodeCuda(node, inputs);
    ASSERT_EQ(got.size(), 1u) << c.equation;
    ExpectTensorsClose(got[0], want[0], kRtol, kAtol, c.equation);
  }
}

// Equations that map to one cublasSgemmStridedBatched.
TEST(CudaEinsum, MatrixProducts) {
  KAIWU_REQUIRE_CUDA();
  ExpectCudaMatchesCpu(
      {
          {"ij,jk->ik", {{37, 29}, {29, 23}}},
          {"ij,jk", {{5, 7}, {7, 3}}},                        // implicit output "ik"
          {"ji,jk->ik", {{11, 6}, {11, 5}}},                  // A transposed
          {"bij,bjk->bik", {{3, 17, 19}, {3, 19, 13}}},       // batched
          {"bnd,dh->bnh", {{4, 7, 16}, {16, 9}}},             // batch folded into M
          {"bhqd,bhkd->bhqk", {{2, 3, 5, 8}, {2, 3, 7, 8}}},  // B transposed
          {"bd,bnd->bn", {{2, 64}, {2, 32, 64}}},             // policies.py multi_input
          {"bd,bnd->bn", {{5, 33}, {5, 7, 33}}},
          {"...ij,...jk->...ik", {{2, 3, 4, 5}, {2, 3, 5, 6}}},  // ellipsis batch
          {"...ij,...jk->...ik", {{2, 3, 4, 5}, {5, 6}}},        // folded into M
          {"i,i", {{33}, {33}}},
          {"i,j->ij", {{7}, {9}}},  // outer product: K = 1
          {"bn,bn->b", {{4, 19}, {4, 19}}},
      },
      1);
}

// Equations the generic kernel runs.
TEST(CudaEinsum, Generic) {
  KAIWU_REQUIRE_CUDA();
  ExpectCudaMatchesCpu(
      {
          {"ii->i", {{6, 6}}},
          {"ii", {{6, 6}}},  // trace
          {"ij->ji", {{5, 9}}},
          {"ijk->kji", {{2, 3, 4}}},
          {"ij->i", {{5, 6}}},
          {"ijk->", {{3, 4, 5}}},
          {"iij->j", {{4, 4, 3}}},
          {"ij,jk,kl->il", {{4, 5}, {5, 6}, {6, 3}}},
          {"bn,anm,bm->ba", {{3, 4}, {5, 4, 6}, {3, 6}}},
          {"bij,bjk", {{2, 3, 4}, {2, 4, 5}}},            // b summed: implicit "ik"
          {"ij,jk->ki", {{4, 5}, {5, 6}}},                // output order not [left, right]
          {"ij,jk->i", {{3, 4}, {4, 5}}},                 // k summed within one operand
          {"bhqd,bkhd->bqhk", {{2, 3, 4, 5}, {2, 6, 3, 5}}},
          {"ij,ij->ij", {{3, 5}, {3, 5}}},  // m = n = k = 1: not worth a GEMM
          {"ij,k->ikj", {{2, 3}, {4}}},
      },
      2);
}

// A size-1 dim broadcast against a larger size of its label.
TEST(CudaEinsum, BroadcastSizeOneDims) {
  KAIWU_REQUIRE_CUDA();
  ExpectCudaMatchesCpu(
      {
          {"ij,ij->i", {{4, 1}, {4, 7}}},
          {"bij,bjk->bik", {{1, 4, 5}, {3, 5, 6}}},
          {"...ij,...jk->...ik", {{2, 1, 4, 5}, {3, 5, 6}}},
      },
      3);
}

// An operand with a zero-size dim: every sum is empty, the output all zeros.
TEST(CudaEinsum, EmptyContraction) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(4);
  const Node node = EinsumNode("ij,jk->ik", 2);
  std::vector<Tensor> got =
      RunNodeCuda(node, {RandomTensor({3, 0}, rng), RandomTensor({0, 4}, rng)});
  ASSERT_EQ(got.size(), 1u);
  ExpectTensorsClose(got[0], MakeTensor<float>({3, 4}, std::vector<float>(12, 0.f)), 0.f, 0.f,
                     "ij,jk->ik with j = 0");
}

TEST(CudaEinsum, UnsupportedVariants) {
  KAIWU_REQUIRE_CUDA();
  auto expect_unsupported = [](const Node& node, const std::vector<Tensor>& inputs,
                               const std::string& what) {
    ExpectCudaError(node, inputs, StatusCode::kUnsupported, what);
  };
  // float64 (the CPU kernel supports it).
  Tensor a(DType::kFloat64, {3, 4}), b(DType::kFloat64, {4, 2});
  for (int64_t i = 0; i < a.size(); ++i) a.As<double>()[i] = 0.5 + i;
  for (int64_t i = 0; i < b.size(); ++i) b.As<double>()[i] = 1.5 - i;
  expect_unsupported(EinsumNode("ij,jk->ik", 2), {a, b}, "float64");
  // More than 8 inputs.
  std::mt19937 rng(5);
  std::vector<Tensor> nine;
  for (int i = 0; i < 9; ++i) nine.push_back(RandomTensor({3}, rng));
  expect_unsupported(EinsumNode("i,i,i,i,i,i,i,i,i->i", 9), nine, "9 inputs");
}

}  // namespace
}  // namespace testing
}  // namespace kaiwu
