// The CUDA FusedMlp kernel (passes/fuse_mlp.h) against a float64 reference of
// the same layers: X and the weights rounded to the 16-bit type as the kernel
// reads them, every layer's products in float64, a layer output that feeds a
// later layer rounded to the 16-bit type (as the kernel keeps it), then the
// bias and activation. Float32 outputs are within float32 accumulation-order
// error of that; 16-bit outputs within one rounding. Sizes: K and N tails of
// the 16 x 8 tiles, W stored [N, K] and [K, N], a layer without bias, heads
// reading one layer, an output also read by a later layer, one row, a part-full
// last block and enough rows for the 64-row blocks. The cluster kernel
// (KAIWU_FUSED_MLP_CLUSTER forces its size and rows per block, 0 the one-block
// kernel): widths that do not divide into the cluster's share of 8-column
// tiles, 1 to 300 rows, every fused activation, both 16-bit types, and a
// network whose slices overflow shared memory (the one-block kernel instead).
// Tolerance: |got - want| <= atol + rtol |want|, 4e-3 for float16, 3e-2 for bfloat16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "half_harness.h"

namespace kaiwu {
namespace testing {
namespace {

struct MlpLayerCase {
  int input;  // -1: X
  int64_t n;
  bool trans_b;
  std::string act;  // "" (none), Relu, Tanh, Sigmoid, LeakyRelu, Clip, HardSigmoid, HardSwish
  bool bias;
};

struct MlpCase {
  int64_t m, k0;
  bool x_float;
  std::vector<MlpLayerCase> layers;
  std::vector<int> out_layers;
  std::vector<bool> out_float;
};

// The activation's two parameters as the cases use them.
std::pair<float, float> ActParams(const std::string& a) {
  if (a == "LeakyRelu") return {0.1f, 0.f};
  if (a == "Clip") return {-0.5f, 0.5f};
  if (a == "HardSigmoid") return {0.2f, 0.5f};
  return {0.f, 0.f};
}

double Act(const std::string& a, double v) {
  const auto [alpha, beta] = ActParams(a);
  if (a == "Relu") return v > 0 ? v : 0;
  if (a == "Tanh") return std::tanh(v);
  if (a == "Sigmoid") return 1 / (1 + std::exp(-v));
  if (a == "LeakyRelu") return v >= 0 ? v : alpha * v;
  if (a == "Clip") return std::min<double>(std::max<double>(v, alpha), beta);
  if (a == "HardSigmoid") return std::min(std::max(v * alpha + beta, 0.0), 1.0);
  if (a == "HardSwish") return v * std::min(std::max(v / 6 + 0.5, 0.0), 1.0);
  return v;
}

// Sets KAIWU_FUSED_MLP_CLUSTER for the scope (null: unset, the kernel's own choice).
class ScopedClusterEnv {
 public:
  explicit ScopedClusterEnv(const char* value) {
    const char* old = std::getenv("KAIWU_FUSED_MLP_CLUSTER");
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value)
      setenv("KAIWU_FUSED_MLP_CLUSTER", value, 1);
    else
      unsetenv("KAIWU_FUSED_MLP_CLUSTER");
  }
  ~ScopedClusterEnv() {
    if (had_)
      setenv("KAIWU_FUSED_MLP_CLUSTER", old_.c_str(), 1);
    else
      unsetenv("KAIWU_FUSED_MLP_CLUSTER");
  }

 private:
  bool had_ = false;
  std::string old_;
};

void CheckMlp(const MlpCase& c, DType dt, std::mt19937& rng) {
  const size_t L = c.layers.size();
  std::vector<int64_t> k(L);
  for (size_t l = 0; l < L; ++l) k[l] = c.layers[l].input < 0 ? c.k0 : c.layers[c.layers[l].input].n;
  Tensor x = RandomTensor({c.m, c.k0}, rng, -2.f, 2.f);
  std::vector<Tensor> inputs = {c.x_float ? x : Narrow(x, dt)};
  std::vector<Tensor> w_half, b_half;
  std::vector<int64_t> inputs_attr, trans_attr, outs_attr, dtypes_attr;
  std::vector<float> params;
  Attribute acts;
  acts.kind = Attribute::Kind::kStrings;
  for (size_t l = 0; l < L; ++l) {
    const MlpLayerCase& lc = c.layers[l];
    const float s = 1.f / std::sqrt(static_cast<float>(k[l]));
    const Shape ws = lc.trans_b ? Shape{lc.n, k[l]} : Shape{k[l], lc.n};
    w_half.push_back(Narrow(RandomTensor(ws, rng, -s, s), dt));
    b_half.push_back(lc.bias ? Narrow(RandomTensor({lc.n}, rng, -0.5f, 0.5f), dt) : Tensor());
    inputs.push_back(w_half.back());
    inputs.push_back(b_half.back());
    inputs_attr.push_back(lc.input);
    trans_attr.push_back(lc.trans_b);
    acts.strings.push_back(lc.act);
    params.push_back(ActParams(lc.act).first);
    params.push_back(ActParams(lc.act).second);
  }
  for (size_t o = 0; o < c.out_layers.size(); ++o) {
    outs_attr.push_back(c.out_layers[o]);
    dtypes_attr.push_back(c.out_float[o] ? 1 : (dt == DType::kFloat16 ? 10 : 16));
  }
  Node node = MakeNode("FusedMlp", static_cast<int>(inputs.size()), static_cast<int>(c.out_layers.size()),
                       {{"layer_inputs", IntsAttr(inputs_attr)},
                        {"layer_trans_b", IntsAttr(trans_attr)},
                        {"layer_acts", acts},
                        {"layer_act_params", FloatsAttr(params)},
                        {"output_layers", IntsAttr(outs_attr)},
                        {"output_dtypes", IntsAttr(dtypes_attr)}});
  node.domain = "kaiwu";
  const std::vector<Tensor> got = RunNodeCuda(node, inputs);
  ASSERT_EQ(got.size(), c.out_layers.size());

  // Reference.
  const Tensor xr = Rounded(x, dt);
  std::vector<std::vector<double>> y(L);
  std::vector<Tensor> y16(L);  // each layer's output as a later layer reads it
  for (size_t l = 0; l < L; ++l) {
    const MlpLayerCase& lc = c.layers[l];
    const Tensor w = Widen(w_half[l]);
    const Tensor b = lc.bias ? Widen(b_half[l]) : Tensor();
    y[l].assign(c.m * lc.n, 0.0);
    for (int64_t r = 0; r < c.m; ++r)
      for (int64_t n = 0; n < lc.n; ++n) {
        double acc = 0;
        for (int64_t kk = 0; kk < k[l]; ++kk) {
          const double a = lc.input < 0 ? xr.As<float>()[r * c.k0 + kk]
                                        : y16[lc.input].As<float>()[r * k[l] + kk];
          acc += a * w.As<float>()[lc.trans_b ? n * k[l] + kk : kk * lc.n + n];
        }
        if (lc.bias) acc += b.As<float>()[n];
        y[l][r * lc.n + n] = Act(lc.act, acc);
      }
    Tensor yf(DType::kFloat32, {c.m, lc.n});
    for (int64_t i = 0; i < yf.size(); ++i) yf.As<float>()[i] = static_cast<float>(y[l][i]);
    y16[l] = Rounded(yf, dt);
  }
  for (size_t o = 0; o < c.out_layers.size(); ++o) {
    const int l = c.out_layers[o];
    const Tensor out = c.out_float[o] ? got[o] : Widen(got[o]);
    ASSERT_EQ(out.shape(), (Shape{c.m, c.layers[l].n}));
    ASSERT_EQ(got[o].dtype(), c.out_float[o] ? DType::kFloat32 : dt);
    const double rtol = dt == DType::kFloat16 ? 4e-3 : 3e-2, atol = dt == DType::kFloat16 ? 4e-3 : 3e-2;
    int bad = 0;
    for (int64_t i = 0; i < out.size() && bad < 5; ++i) {
      const double want = y[l][i], v = out.As<float>()[i];
      if (std::fabs(v - want) > atol + rtol * std::fabs(want)) {
        ++bad;
        ADD_FAILURE() << DTypeName(dt) << " m " << c.m << " KAIWU_FUSED_MLP_CLUSTER="
                      << (std::getenv("KAIWU_FUSED_MLP_CLUSTER") ? std::getenv("KAIWU_FUSED_MLP_CLUSTER") : "(unset)") << " output " << o << " (layer " << l << ") at " << i
                      << ": " << v << " vs " << want;
      }
    }
  }
}

TEST(CudaFusedMlp, PolicyBodyAndHeads) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(301);
  // obs 64 -> 256 tanh -> 256 tanh -> {pi 18, v 1}, float32 in and out.
  for (int64_t m : {1, 17, 300, 5000}) {
    MlpCase c{m, 64, true,
              {{-1, 256, true, "Tanh", true}, {0, 256, true, "Tanh", true}, {1, 18, true, "", true},
               {1, 1, true, "", true}},
              {2, 3}, {true, true}};
    CheckMlp(c, DType::kFloat16, rng);
  }
}

TEST(CudaFusedMlp, TailsLayoutsAndOutputs) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(302);
  for (DType dt : {DType::kFloat16, DType::kBFloat16})
    for (int64_t m : {3, 40}) {
      MlpCase c{m, 12, false,
                {{-1, 40, false, "Relu", true}, {0, 24, true, "LeakyRelu", false},
                 {1, 5, false, "Sigmoid", true}, {-1, 9, true, "", true}},
                {1, 2, 3}, {false, true, true}};
      CheckMlp(c, dt, rng);
    }
}

TEST(CudaFusedMlp, ClusterSizesRowsAndTails) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(304);
  // Columns 300, 33, 5, 9, 40: not multiples of 8 * cluster; K 20 and 33 not of 16;
  // [K, N] and [N, K]; heads on X and on layer 0 (phases of 3 and 2 layers).
  const std::vector<MlpLayerCase> layers = {
      {-1, 300, true, "Relu", true}, {0, 33, false, "Tanh", false}, {1, 5, true, "Sigmoid", true},
      {-1, 9, false, "LeakyRelu", true}, {0, 40, true, "HardSwish", true}, {-1, 17, true, "", true}};
  for (const char* env : {static_cast<const char*>(nullptr), "2", "4:2", "8:4", "16", "16:4", "0"}) {
    ScopedClusterEnv scoped(env);
    for (int64_t m : {1, 7, 16, 17, 33, 300}) {
      MlpCase c{m, 20, true, layers, {0, 2, 3, 4, 5}, {false, true, true, false, true}};
      CheckMlp(c, DType::kFloat16, rng);
    }
  }
}

TEST(CudaFusedMlp, ClusterEveryActivationBothTypes) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(305);
  for (const char* env : {static_cast<const char*>(nullptr), "8", "0"}) {
    ScopedClusterEnv scoped(env);
    for (DType dt : {DType::kFloat16, DType::kBFloat16})
      for (const std::string act : {"", "Relu", "LeakyRelu", "Tanh", "Sigmoid", "Clip", "HardSigmoid", "HardSwish"}) {
        MlpCase c{17, 64, false,
                  {{-1, 72, true, act, true}, {0, 130, false, act, true}, {1, 18, true, act, false}},
                  {1, 2}, {false, true}};
        CheckMlp(c, dt, rng);
      }
  }
}

TEST(CudaFusedMlp, ClusterSlicesPastSharedMemoryUseOneBlock) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(306);
  // Five 256 x 256 layers: a cluster of 2 would hold 5 x 128 x 264 x 2 bytes of
  // slices (338 KB), so the one-block kernel runs; 16 blocks hold theirs.
  std::vector<MlpLayerCase> layers = {{-1, 256, true, "Tanh", true}};
  for (int l = 0; l < 4; ++l) layers.push_back({l, 256, true, "Tanh", true});
  for (const char* env : {"2", "16"}) {
    ScopedClusterEnv scoped(env);
    for (int64_t m : {3, 40}) {
      MlpCase c{m, 256, true, layers, {4}, {true}};
      CheckMlp(c, DType::kFloat16, rng);
    }
  }
}

TEST(CudaFusedMlp, TooManyLayersIsUnsupported) {
  KAIWU_REQUIRE_CUDA();
  std::mt19937 rng(303);
  std::vector<Tensor> in = {RandomTensor({2, 8}, rng)};
  std::vector<int64_t> layer_inputs;
  Attribute acts;
  acts.kind = Attribute::Kind::kStrings;
  for (int l = 0; l < 9; ++l) {
    in.push_back(Narrow(RandomTensor({8, 8}, rng), DType::kFloat16));
    in.push_back(Tensor());
    layer_inputs.push_back(l - 1);
    acts.strings.push_back("Relu");
  }
  Node node = MakeNode("FusedMlp", static_cast<int>(in.size()), 1,
                       {{"layer_inputs", IntsAttr(layer_inputs)},
                        {"layer_trans_b", IntsAttr(std::vector<int64_t>(9, 1))},
                        {"layer_acts", acts},
                        {"layer_act_params", FloatsAttr(std::vector<float>(18, 0.f))},
                        {"output_layers", IntsAttr({8})},
                        {"output_dtypes", IntsAttr({1})}});
  node.domain = "kaiwu";
  ExpectCudaError(node, in, StatusCode::kUnsupported, "FusedMlp with 9 layers");
}

}  // namespace
}  // namespace testing
}  // namespace kaiwu
