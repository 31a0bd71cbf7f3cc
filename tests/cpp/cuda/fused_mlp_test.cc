// The CUDA FusedMlp kernel (passes/fuse_mlp.h) against a float64 reference of
// the same layers: X and the weights rounded to the 16-bit type as the kernel
// reads them, every layer's products in float64, a layer output that feeds a
// later layer rounded to the 16-bit type (as the kernel keeps it), then the
// bias and activation. Float32 outputs are within float32 accumulation-order
// error of that; 16-bit outputs within one rounding. Sizes: K and N tails of
// the 16 x 8 tiles, W stored [N, K] and [K, N], a layer without bias, heads
// reading one layer, an output also read by a later layer, one row, a part-full
// last block and enough rows for the 64-row blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "half_harness.h"

namespace kaiwu {
namespace testing {
namespace {

struct MlpLayerCase {
  int input;  // -1: X
  int64_t n;
  bool trans_b;
  std::string act;  // "" (none), Relu, Tanh, Sigmoid, LeakyRelu
  bool bias;
};

struct MlpCase {
  int64_t m, k0;
  bool x_float;
  std::vector<MlpLayerCase> layers;
  std::vector<int> out_layers;
  std::vector<bool> out_float;
};

double Act(const std::string& a, double v) {
  if (a == "Relu") return v > 0 ? v : 0;
  if (a == "Tanh") return std::tanh(v);
  if (a == "Sigmoid") return 1 / (1 + std::exp(-v));
  if (a == "LeakyRelu") return v >= 0 ? v : 0.1 * v;
  return v;
}

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
    params.push_back(lc.act == "LeakyRelu" ? 0.1f : 0.f);
    params.push_back(0.f);
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
        ADD_FAILURE() << DTypeName(dt) << " m " << c.m << " output " << o << " (layer " << l << ") at " << i
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
