// The prepacked-B GEMM (backends/cpu/sgemm_packed.h) and the PackedGemm op
// against float64 references: odd sizes (row tails of every tile height,
// column tails inside a panel or its first vector, one column, k across cache
// blocks and row blocks), bias and fused activations, 1 and 2 threads
// (bit-identical), packing of B and B^T.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "backends/cpu/sgemm_packed.h"
#include "backends/cpu/sgemm_packed_isa.h"
#include "kernel_harness.h"

namespace kaiwu {
namespace {

using testing::IntAttr;
using testing::MakeNode;
using testing::RunNode;

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double Act(FusedActivation::Kind kind, double x) {
  switch (kind) {
    case FusedActivation::Kind::kRelu: return x > 0 ? x : 0;
    case FusedActivation::Kind::kTanh: return std::tanh(x);
    default: return x;
  }
}

std::vector<cpu::PackedIsa> AvailableIsas() {
  std::vector<cpu::PackedIsa> isas;
  for (auto isa : {cpu::PackedIsa::kScalar, cpu::PackedIsa::kAvx2, cpu::PackedIsa::kAvx512})
    if (cpu::PackedIsaAvailable(isa)) isas.push_back(isa);
  return isas;
}

// Every variant this CPU runs (scalar, AVX2, AVX-512), whatever the build
// targets: the variants are compiled with their own flags and chosen by cpuid.
TEST(SgemmPacked, MatchesFloat64Reference) {
  for (cpu::PackedIsa isa : AvailableIsas()) {
  SCOPED_TRACE(cpu::PackedIsaName(isa));
  std::mt19937 rng(14);
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {1, 18, 512}, {2, 33, 7},
                         {5, 16, 300}, {6, 17, 256}, {7, 100, 257}, {13, 47, 31}, {25, 130, 600},
                         {64, 64, 64}, {250, 19, 33}, {3, 257, 5},
                         // One column (dot products), with k tails and k blocks.
                         {1, 1, 300}, {7, 1, 13}, {1031, 1, 257}, {37, 1, 520},
                         // A last panel of one vector or less (AVX2: its own
                         // tiles) beside whole ones, and one just past it.
                         {9, 2, 64}, {301, 8, 40}, {263, 24, 129}, {61, 25, 300},
                         // A short last row block, split across threads.
                         {487, 18, 256}, {250, 130, 70},
                         // Few rows and few column groups: row blocks crossed
                         // with column groups (2 and 3 threads).
                         {17, 40, 500}, {30, 90, 300}, {40, 200, 100}}) {
    for (bool trans_b : {false, true})
      for (auto kind : {FusedActivation::Kind::kNone, FusedActivation::Kind::kRelu,
                        FusedActivation::Kind::kTanh})
        for (bool with_bias : {false, true}) {
          const int64_t lda = k + 3, ldc = n + 5, panels = (n + 15) / 16;
          std::vector<float> a = Random(m * lda, rng), b = Random(k * n, rng),
                             bias = Random(n, rng);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t q = k; q < lda; ++q) a[i * lda + q] = kNaN;  // never read
          std::vector<float> packed(panels * k * 16);
          cpu::PackB(trans_b, k, n, b.data(), packed.data());
          cpu::Activation act;
          act.kind = kind;
          std::vector<float> c1(m * ldc, kNaN), c2(m * ldc, kNaN), c3(m * ldc, kNaN);
          ThreadPool one(1), two(2), three(3);
          const float* bp = with_bias ? bias.data() : nullptr;
          cpu::SgemmPackedB(isa, m, n, k, a.data(), lda, packed.data(), bp, act, c1.data(), ldc,
                            &one);
          cpu::SgemmPackedB(isa, m, n, k, a.data(), lda, packed.data(), bp, act, c2.data(), ldc,
                            &two);
          cpu::SgemmPackedB(isa, m, n, k, a.data(), lda, packed.data(), bp, act, c3.data(), ldc,
                            &three);
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              double s = with_bias ? bias[j] : 0.0;
              for (int64_t q = 0; q < k; ++q)
                s += double(a[i * lda + q]) * (trans_b ? b[j * k + q] : b[q * n + j]);
              const double want = Act(kind, s);
              ASSERT_NEAR(c1[i * ldc + j], want, 1e-5 * (1 + std::sqrt(double(k))))
                  << "m" << m << " n" << n << " k" << k << " trans_b " << trans_b;
              // The same summation order with any split: bit-identical.
              ASSERT_EQ(c1[i * ldc + j], c2[i * ldc + j]) << "m" << m << " n" << n << " k" << k;
              ASSERT_EQ(c1[i * ldc + j], c3[i * ldc + j]) << "m" << m << " n" << n << " k" << k;
            }
            for (int64_t j = n; j < ldc; ++j)
              ASSERT_TRUE(std::isnan(c1[i * ldc + j]) && std::isnan(c2[i * ldc + j]) &&
                          std::isnan(c3[i * ldc + j]));
          }
        }
  }
  }
}

// Tanh in the tile's store (a rational function, as Eigen's): the clamp at
// +-8, the tiny inputs passed through, the middle range, against std::tanh,
// in whole vectors and a column tail.
TEST(SgemmPacked, FusedTanhMatchesStdTanh) {
  const std::vector<float> xs = {0.f,     1e-7f, -3e-5f, 0.00039f, -0.0004f, 0.0041f, -0.1f,
                                 0.5f,    -1.f,  1.7f,   -3.f,     5.5f,     -7.99f,  8.f,
                                 -8.01f,  12.f,  -40.f,  1e30f,    -1e30f};
  const int64_t m = static_cast<int64_t>(xs.size()), n = 21, k = 1;
  std::vector<float> b(n);
  for (int64_t j = 0; j < n; ++j) b[j] = 1.f - 0.09f * static_cast<float>(j);
  std::vector<float> packed((n + 15) / 16 * 16 * k);
  cpu::PackB(false, k, n, b.data(), packed.data());
  cpu::Activation act;
  act.kind = FusedActivation::Kind::kTanh;
  for (cpu::PackedIsa isa : AvailableIsas()) {
    SCOPED_TRACE(cpu::PackedIsaName(isa));
    std::vector<float> c(m * n);
    ThreadPool one(1);
    cpu::SgemmPackedB(isa, m, n, k, xs.data(), k, packed.data(), nullptr, act, c.data(), n, &one);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const float x = xs[i] * b[j];
        const double want = std::tanh(static_cast<double>(x));
        EXPECT_NEAR(c[i * n + j], want, 4e-7 * std::max(1e-3, std::fabs(want)) + 1e-9)
            << "x " << x;
      }
  }
}

// KAIWU_CPU_ISA caps the variant: "avx2" forces the AVX2 path on an AVX-512
// machine (so CI covers it), "scalar" the portable one.
TEST(SgemmPacked, EnvironmentCapsTheInstructionSet) {
  const char* old = std::getenv("KAIWU_CPU_ISA");
  const std::string saved = old ? old : "";
  setenv("KAIWU_CPU_ISA", "avx2", 1);
  EXPECT_EQ(cpu::DetectPackedIsa(), cpu::PackedIsaAvailable(cpu::PackedIsa::kAvx2)
                                        ? cpu::PackedIsa::kAvx2
                                        : cpu::PackedIsa::kScalar);
  setenv("KAIWU_CPU_ISA", "scalar", 1);
  EXPECT_EQ(cpu::DetectPackedIsa(), cpu::PackedIsa::kScalar);
  unsetenv("KAIWU_CPU_ISA");
  const cpu::PackedIsa widest = cpu::PackedIsaAvailable(cpu::PackedIsa::kAvx512)
                                    ? cpu::PackedIsa::kAvx512
                                    : cpu::PackedIsaAvailable(cpu::PackedIsa::kAvx2)
                                          ? cpu::PackedIsa::kAvx2
                                          : cpu::PackedIsa::kScalar;
  EXPECT_EQ(cpu::DetectPackedIsa(), widest);
  if (old) setenv("KAIWU_CPU_ISA", saved.c_str(), 1);
}

// The op: A of rank 3 (leading dims fold into M), bias [1, n], fused Relu,
// against a float64 reference; a packed B of the wrong shape names the node.
TEST(SgemmPacked, PackedGemmOp) {
  std::mt19937 rng(3);
  const int64_t n = 21, k = 40;
  Tensor a = testing::RandomTensor({2, 3, k}, rng);
  std::vector<float> b = Random(k * n, rng);
  Tensor packed(DType::kFloat32, {2, k, 16});
  cpu::PackB(false, k, n, b.data(), packed.As<float>());
  Tensor bias = testing::RandomTensor({1, n}, rng);
  Node node = MakeNode("PackedGemm", 3, 1,
                       {{"n", IntAttr(n)}, {"_kaiwu_act", testing::StrAttr("Relu")}});
  node.domain = "kaiwu";
  for (int threads : {1, 2}) {
    std::vector<Tensor> out = RunNode(node, {a, packed, bias}, threads);
    ASSERT_EQ(out[0].shape(), (Shape{2, 3, n}));
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = bias.As<float>()[j];
        for (int64_t q = 0; q < k; ++q) s += double(a.As<float>()[i * k + q]) * b[q * n + j];
        EXPECT_NEAR(out[0].As<float>()[i * n + j], s > 0 ? s : 0, 1e-5);
      }
  }
  testing::ExpectModelError(node, {testing::Info(DType::kFloat32, {2, 3, k}),
                                   testing::Info(DType::kFloat32, {1, k, 16})},
                            "packed B must be");
}

}  // namespace
}  // namespace kaiwu
