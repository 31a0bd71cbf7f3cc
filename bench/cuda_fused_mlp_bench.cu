// Kernel-only check and timing of FusedMlp (backends/cuda/fused_mlp.cu): the one-block
// kernel against the cluster kernel at each cluster size and rows per block, one run.
// Per batch: every variant's outputs against a float64 reference (random data, outputs
// poisoned with NaN first), then its time per kernel: 50 launches back to back in a
// CUDA graph, the median of 7 replays; for the cluster the engine picks (AutoCluster),
// the mean clock64() cycles from a block's start to each step (Stamp in
// fused_mlp_cluster.cuh); the empty-launch floor. Shapes: the mlp policy (64 -> 256
// tanh -> 256 tanh -> 18 + 1); with --odd also a checked-only network with tails,
// [K, N] weights, a layer without bias, heads on X and four phases at 1-300 rows.
// Built on the device from the repository root (the kernel's host helpers are not linked):
//   nvcc -std=c++17 -arch=sm_90 -O3 -Icpp/src -Icpp/include --expt-relaxed-constexpr \
//     bench/cuda_fused_mlp_bench.cu -o /tmp/fused_mlp_bench -Xlinker --unresolved-symbols=ignore-all
//   /tmp/fused_mlp_bench [batches, default 1,32,256,1024] [--odd]
// bench/run_fused_mlp_device.sh runs it with the tests and the policy A/B in one call.
#include "backends/cuda/fused_mlp.cu"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>
using namespace kaiwu;
using namespace kaiwu::cuda;

__global__ void EmptyKernel(int* p) {
  if (p) *p = 1;
}

namespace {

struct LayerSpec {
  int input, n;
  FusedActivation::Kind act;
  bool trans_b, bias;
};

float Half(float v) { return __half2float(__float2half(v)); }

double ActD(FusedActivation::Kind k, double v) {
  using K = FusedActivation::Kind;
  if (k == K::kRelu) return v > 0 ? v : 0;
  if (k == K::kLeakyRelu) return v >= 0 ? v : 0.1 * v;
  if (k == K::kTanh) return std::tanh(v);
  if (k == K::kSigmoid) return 1 / (1 + std::exp(-v));
  return v;
}

struct Net {
  FusedMlpParams p;
  int k0 = 0;
  std::vector<std::vector<float>> w, b;  // fp16-rounded values
  std::vector<float> x;
  std::vector<std::vector<double>> ref;  // per layer, [m][n]
  std::vector<void*> dw, db, dy;
  float* dx = nullptr;
};

Net MakeNet(int64_t m, int k0, const std::vector<LayerSpec>& spec, std::mt19937& rng) {
  Net net;
  net.k0 = k0;
  net.p.m = m;
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  net.x.resize(m * k0);
  for (float& v : net.x) v = 2 * u(rng);
  const size_t L = spec.size();
  for (size_t l = 0; l < L; ++l) {
    FusedMlpParams::Layer d;
    d.input = spec[l].input;
    d.k = d.input < 0 ? k0 : spec[d.input].n;
    d.n = spec[l].n;
    d.trans_b = spec[l].trans_b;
    d.has_bias = spec[l].bias;
    d.act.kind = spec[l].act;
    d.act.alpha = 0.1f;
    net.p.layers.push_back(d);
    const float s = 1.f / std::sqrt(static_cast<float>(d.k));
    std::vector<float> w(d.k * d.n), b(d.n);
    for (float& v : w) v = Half(s * u(rng));
    for (float& v : b) v = Half(0.5f * u(rng));
    net.w.push_back(w);
    net.b.push_back(b);
  }
  // Reference: X and kept outputs rounded to fp16 as the kernel holds them.
  for (size_t l = 0; l < L; ++l) {
    const auto& d = net.p.layers[l];
    std::vector<double> y(m * d.n);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t n = 0; n < d.n; ++n) {
        double acc = d.has_bias ? net.b[l][n] : 0.0;
        for (int64_t k = 0; k < d.k; ++k) {
          const double a = d.input < 0 ? Half(net.x[r * k0 + k]) : Half(static_cast<float>(net.ref[d.input][r * d.k + k]));
          acc += a * net.w[l][d.trans_b ? n * d.k + k : k * d.n + n];
        }
        y[r * d.n + n] = ActD(d.act.kind, acc);
      }
    net.ref.push_back(y);
    net.p.output_layers.push_back(static_cast<int>(l));  // every layer an output
  }
  cudaMalloc(&net.dx, m * k0 * 4);
  cudaMemcpy(net.dx, net.x.data(), m * k0 * 4, cudaMemcpyHostToDevice);
  for (size_t l = 0; l < L; ++l) {
    const auto& d = net.p.layers[l];
    std::vector<__half> wh(net.w[l].size()), bh(d.n);
    for (size_t i = 0; i < wh.size(); ++i) wh[i] = __float2half(net.w[l][i]);
    for (int64_t i = 0; i < d.n; ++i) bh[i] = __float2half(net.b[l][i]);
    void *w, *b, *y;
    cudaMalloc(&w, wh.size() * 2);
    cudaMalloc(&b, d.n * 2);
    cudaMalloc(&y, m * d.n * 4);
    cudaMemcpy(w, wh.data(), wh.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(b, bh.data(), d.n * 2, cudaMemcpyHostToDevice);
    net.dw.push_back(w);
    net.db.push_back(d.has_bias ? b : nullptr);
    net.dy.push_back(y);
  }
  return net;
}

// Max over outputs of |got - want| / (4e-3 + 4e-3 |want|); NaN (unwritten) gives 1e9.
double Check(const Net& net) {
  double worst = 0;
  for (size_t l = 0; l < net.p.layers.size(); ++l) {
    const auto& d = net.p.layers[l];
    std::vector<float> got(net.p.m * d.n);
    cudaMemcpy(got.data(), net.dy[l], got.size() * 4, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < got.size(); ++i) {
      const double want = net.ref[l][i], e = std::fabs(got[i] - want) / (4e-3 + 4e-3 * std::fabs(want));
      worst = std::isnan(got[i]) ? 1e9 : std::max(worst, e);
    }
  }
  return worst;
}

// Checks the plan's outputs, then times it; returns us per kernel (-1: did not run).
float Run(Net& net, MlpPlan plan, double* err, bool time_it) {
  *err = -1;
  int active = 0;  // clusters in waves run too here (the engine takes the one-block kernel then)
  const cudaError_t ce = ConfigureFusedMlp<__half>(plan, &active);
  if (plan.smem > kMlpMaxSmem || (ce != cudaSuccess && !(ce == cudaErrorNotSupported && active > 0))) {
    cudaGetLastError();
    return -1;
  }
  MlpArgs a = plan.args;
  a.x = net.dx;
  for (int l = 0; l < a.layers; ++l) {
    a.layer[l].w = static_cast<const uint16_t*>(net.dw[l]);
    a.layer[l].b = static_cast<const uint16_t*>(net.db[l]);
    a.layer[l].y = net.dy[l];
    a.layer[l].y_float = 1;
    if (reinterpret_cast<uintptr_t>(a.layer[l].w) % 16) a.layer[l].vec16 = 0;
    cudaMemset(net.dy[l], 0xff, net.p.m * a.layer[l].n * 4);
  }
  cudaStream_t s;
  cudaStreamCreate(&s);
  cudaError_t e = LaunchFusedMlp<__half>(plan, a, s);
  cudaError_t e2 = cudaStreamSynchronize(s);
  if (e != cudaSuccess || e2 != cudaSuccess) {
    std::printf("  launch failed: %s / %s\n", cudaGetErrorString(e), cudaGetErrorString(e2));
    std::exit(1);
  }
  *err = Check(net);
  if (!time_it) return 0;
  cudaGraph_t g;
  cudaGraphExec_t ge;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  for (int i = 0; i < 50; ++i) LaunchFusedMlp<__half>(plan, a, s);
  cudaStreamEndCapture(s, &g);
  cudaGraphInstantiate(&ge, g, 0);
  for (int i = 0; i < 3; ++i) cudaGraphLaunch(ge, s);
  cudaStreamSynchronize(s);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> t;
  for (int r = 0; r < 7; ++r) {
    cudaEventRecord(e0, s);
    cudaGraphLaunch(ge, s);
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    t.push_back(ms * 1000 / 50);
  }
  std::sort(t.begin(), t.end());
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  if (cudaGetLastError() != cudaSuccess) return -1;
  return t[3];
}


// Time per launch of an empty kernel of `blocks` blocks in clusters of `c` (0: none), in a graph of 50.
float EmptyLaunchUs(int blocks, int c) {
  cudaStream_t s;
  cudaStreamCreate(&s);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(kMlpClusterThreads);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = c;
  attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = c > 0 ? 1 : 0;
  if (c > 8) cudaFuncSetAttribute(EmptyKernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  for (int i = 0; i < 50; ++i) cudaLaunchKernelEx(&cfg, EmptyKernel, static_cast<int*>(nullptr));
  cudaStreamEndCapture(s, &g);
  cudaGraphInstantiate(&ge, g, 0);
  cudaGraphLaunch(ge, s);
  cudaStreamSynchronize(s);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0, s);
  for (int r = 0; r < 5; ++r) cudaGraphLaunch(ge, s);
  cudaEventRecord(e1, s);
  cudaEventSynchronize(e1);
  float ms;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaStreamDestroy(s);
  return cudaGetLastError() == cudaSuccess ? ms * 1000 / 250 : -1;
}

// Mean clock64() cycles from each block's start to its steps (Stamp in fused_mlp_cluster.cuh).
void PrintSteps(Net& net, MlpPlan plan) {
  if (plan.cluster == 0 || plan.smem > kMlpMaxSmem || ConfigureFusedMlp<__half>(plan) != cudaSuccess) return;
  std::printf("  auto plan: %u blocks, %lld bytes of shared memory\n", plan.grid, static_cast<long long>(plan.smem));
  long long* st;
  cudaMalloc(&st, plan.grid * 32 * sizeof(long long));
  cudaMemset(st, 0, plan.grid * 32 * sizeof(long long));
  MlpArgs a = plan.args;
  a.x = net.dx;
  for (int l = 0; l < a.layers; ++l) {
    a.layer[l].w = static_cast<const uint16_t*>(net.dw[l]);
    a.layer[l].b = static_cast<const uint16_t*>(net.db[l]);
    a.layer[l].y = net.dy[l];
    a.layer[l].y_float = 1;
  }
  a.stamps = st;
  for (int i = 0; i < 3; ++i) LaunchFusedMlp<__half>(plan, a, 0);
  cudaDeviceSynchronize();
  std::vector<long long> h(plan.grid * 32);
  cudaMemcpy(h.data(), st, h.size() * sizeof(long long), cudaMemcpyDeviceToHost);
  std::printf("  steps (cycles from block start, mean over %u blocks):", plan.grid);
  for (int k : {17, 18, 19, 20, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}) {
    double sum = 0;
    int n = 0;
    for (unsigned b = 0; b < plan.grid; ++b)
      if (h[b * 32 + k]) sum += h[b * 32 + k] - h[b * 32], ++n;
    if (n) std::printf(" %d:%.0f", k, sum / n);
  }
  std::printf("\n");
  cudaFree(st);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> batches = {1, 32, 256, 1024};
  bool odd = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--odd")) {
      odd = true;
    } else {
      batches.clear();
      for (const char* c = argv[i]; *c;) {
        batches.push_back(std::atoll(c));
        const char* comma = std::strchr(c, ',');
        c = comma ? comma + 1 : c + std::strlen(c);
      }
    }
  }
  int sms = 132;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  using K = FusedActivation::Kind;
  const std::vector<LayerSpec> mlp = {
      {-1, 256, K::kTanh, true, true}, {0, 256, K::kTanh, true, true}, {1, 18, K::kNone, true, true},
      {1, 1, K::kNone, true, true}};
  const std::vector<LayerSpec> odd_net = {
      {-1, 40, K::kRelu, false, true}, {0, 24, K::kLeakyRelu, true, false}, {1, 5, K::kSigmoid, false, true},
      {-1, 9, K::kNone, true, true},   {1, 33, K::kTanh, true, true},       {4, 300, K::kRelu, true, true}};
  std::mt19937 rng(7);
  int failures = 0;
  std::printf("empty launch in a graph: 16 blocks %.2f us, cluster 8 %.2f, cluster 16 %.2f; 128 blocks %.2f, "
              "cluster 8 %.2f, cluster 16 %.2f\n",
              EmptyLaunchUs(16, 0), EmptyLaunchUs(16, 8), EmptyLaunchUs(16, 16), EmptyLaunchUs(128, 0),
              EmptyLaunchUs(128, 8), EmptyLaunchUs(128, 16));
  for (int pass = 0; pass < (odd ? 2 : 1); ++pass) {
    const bool time_it = pass == 0;
    const std::vector<int64_t> ms = time_it ? batches : std::vector<int64_t>{1, 7, 16, 17, 33, 300};
    for (int64_t m : ms) {
      Net net = MakeNet(m, time_it ? 64 : 12, time_it ? mlp : odd_net, rng);
      const auto pick = AutoCluster(net.p, sms);
      int active[17] = {};
      for (int c : {2, 4, 8, 16}) {
        MlpPlan probe = PlanFusedMlp(net.p, true, net.k0, sms, c, 1);
        probe.grid = c;
        ConfigureFusedMlp<__half>(probe, &active[c]);
        cudaGetLastError();
      }
      std::printf("%s m %lld (auto: cluster %d mt %d; clusters active at once of 2/4/8/16: %d/%d/%d/%d)\n",
                  time_it ? "mlp" : "odd", static_cast<long long>(m), pick.first, pick.second, active[2], active[4],
                  active[8], active[16]);
      double err, worst = 0;
      int variants = 1;
      const float old_us = Run(net, PlanFusedMlp(net.p, true, net.k0, sms, 0, 0), &err, time_it);
      if (time_it) std::printf("  one-block          %7.2f us  err %.3f\n", old_us, err);
      failures += err < 0 || err > 1;
      worst = err;
      for (int c : {2, 4, 8, 16})
        for (int mt : {1, 2, 4}) {
          const float us = Run(net, PlanFusedMlp(net.p, true, net.k0, sms, c, mt), &err, time_it);
          if (err < 0) continue;
          failures += err > 1;
          worst = std::max(worst, err);
          ++variants;
          if (time_it)
            std::printf("  cluster %2d mt %d    %7.2f us  err %.3f  x%.2f%s\n", c, mt, us, err,
                      us > 0 ? old_us / us : 0.0, c == pick.first && mt == pick.second ? "  <- auto" : "");
        }
      if (time_it) PrintSteps(net, PlanFusedMlp(net.p, true, net.k0, sms, pick.first, pick.second));
      if (!time_it) std::printf("  %d variants, worst err %.3f (1 = at tolerance)\n", variants, worst);
    }
  }
  std::printf("%s (%d failures)\n", failures ? "FAILED" : "all outputs within tolerance", failures);
  return failures ? 1 : 0;
}
