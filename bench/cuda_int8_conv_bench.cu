// Kernel-only check and timing of the channels-last integer conv (QLinearFused,
// backends/cuda/quant_fused.cu, ALoad::kNhwcVec) at the engine's tile: 64 rows a
// block x 64 channels above 32 channels, else 32 (128 rows a block, tried with this
// bench, ran slower on every shape: bench/notes/cuda.md).
// Per conv: uint8 NHWC input with a nonzero zero point, full-range int8 weights
// packed as QPackWeights packs them (k in kernel row, column, channel order),
// per-channel scales, bias, Relu and a uint8 output. Each variant's output is
// checked on 4,096 random output elements against a float64 reference of the
// same epilogue (one step allowed where the float epilogue rounds a tie the other
// way), then timed: 20 launches back to back, median of 7 (CUDA events), with its
// rate in int8 TOPS. Shapes: Nature CNN's three convs (atari_cnn) and two IMPALA
// residual convs (16 and 32 channels, 3x3, pad 1) at the given batch.
// Built on the device from the repository root (the kernel's host helpers are not linked):
//   nvcc -std=c++17 -arch=sm_90 -O3 -Icpp/src -Icpp/include --expt-relaxed-constexpr \
//     bench/cuda_int8_conv_bench.cu -o /tmp/int8_conv_bench -Xlinker --unresolved-symbols=ignore-all
//   /tmp/int8_conv_bench [batch, default 256]
#include "backends/cuda/quant_fused.cu"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>
using namespace kaiwu;
using namespace kaiwu::cuda;

namespace {

struct ConvShape {
  const char* name;
  int c, h, w, m, kh, kw, s, p;
};

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

struct Problem {
  ConvShape sh;
  int batch, oh, ow, K;
  std::vector<uint8_t> x, packed;
  std::vector<int8_t> w;  // [m][K], k = (kh, kw, c)
  int xz, yz;
  float inv;
  std::vector<float> mult, bias;
  std::vector<int32_t> corr;
  FusedArgs args{};
  uint8_t *dx = nullptr, *dpacked = nullptr, *dy = nullptr;
};

Problem Make(const ConvShape& sh, int batch, std::mt19937& rng) {
  Problem P;
  P.sh = sh;
  P.batch = batch;
  P.oh = (sh.h + 2 * sh.p - sh.kh) / sh.s + 1;
  P.ow = (sh.w + 2 * sh.p - sh.kw) / sh.s + 1;
  P.K = sh.kh * sh.kw * sh.c;
  std::uniform_int_distribution<int> byte(0, 255), wgt(-128, 127);
  P.x.resize(static_cast<size_t>(batch) * sh.h * sh.w * sh.c);
  for (auto& v : P.x) v = static_cast<uint8_t>(byte(rng));
  P.w.resize(static_cast<size_t>(sh.m) * P.K);
  for (auto& v : P.w) v = static_cast<int8_t>(wgt(rng));
  P.xz = 3;
  P.yz = 5;
  const QPackedLayout L(P.K, sh.m);
  P.packed.assign(L.bytes(), 0);
  // Scales so that a typical sum lands mid-range: |acc| ~ sqrt(K) * 128 * 74.
  const float y_scale = 0.05f;
  P.inv = 1.f / y_scale;
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  int32_t* hdr = reinterpret_cast<int32_t*>(P.packed.data());
  hdr[0] = 0;  // no weight zero points
  hdr[1] = P.xz;
  std::memcpy(&hdr[2], &P.inv, 4);
  hdr[3] = P.yz;
  P.mult.resize(sh.m);
  P.bias.resize(sh.m);
  P.corr.resize(sh.m);
  for (int c = 0; c < sh.m; ++c) {
    int64_t sum = 0;
    for (int k = 0; k < P.K; ++k) {
      P.packed[L.weights() + static_cast<size_t>(c) * L.kp + k] = static_cast<uint8_t>(P.w[c * P.K + k]);
      sum += P.w[c * P.K + k];
    }
    P.corr[c] = static_cast<int32_t>(-P.xz * sum);
    P.mult[c] = u(rng) * 4.f * y_scale / (128.f * 74.f * std::sqrt(static_cast<float>(P.K)));
    P.bias[c] = (u(rng) - 1.f) * 2.f;
    std::memcpy(&P.packed[L.corr() + 4 * c], &P.corr[c], 4);
    std::memcpy(&P.packed[L.mult() + 4 * c], &P.mult[c], 4);
    std::memcpy(&P.packed[L.bias() + 4 * c], &P.bias[c], 4);
    const int32_t ws = static_cast<int32_t>(sum);
    std::memcpy(&P.packed[L.wsum() + 4 * c], &ws, 4);
  }
  FusedArgs& a = P.args;
  a.M = static_cast<int64_t>(batch) * P.oh * P.ow;
  a.n = sh.m;
  a.K = P.K;
  a.kp = static_cast<int>(L.kp);
  a.rows_from = sh.m;
  a.corr = L.corr();
  a.mult = L.mult();
  a.bias = L.bias();
  a.wzp = L.wzp();
  a.wsum = L.wsum();
  a.C = sh.c;
  a.H = sh.h;
  a.W = sh.w;
  a.OW = P.ow;
  a.P = P.oh * P.ow;
  a.KH = sh.kh;
  a.KW = sh.kw;
  a.sh = a.sw = sh.s;
  a.ph = a.pw = sh.p;
  a.dh = a.dw = 1;
  a.y_kind = 1;
  FusedActivation relu;
  relu.kind = FusedActivation::Kind::kRelu;
  a.act = DeviceActivation::From(relu);
  a.ktiles_per_split = (P.K + kBK - 1) / kBK;
  Check(cudaMalloc(&P.dx, P.x.size()), "malloc x");
  Check(cudaMalloc(&P.dpacked, P.packed.size()), "malloc packed");
  Check(cudaMalloc(&P.dy, static_cast<size_t>(a.M) * sh.m), "malloc y");
  Check(cudaMemcpy(P.dx, P.x.data(), P.x.size(), cudaMemcpyHostToDevice), "copy x");
  Check(cudaMemcpy(P.dpacked, P.packed.data(), P.packed.size(), cudaMemcpyHostToDevice), "copy packed");
  a.x = P.dx;
  a.packed = P.dpacked;
  a.y = P.dy;
  return P;
}

// The reference output byte of row m (image, pixel), channel c.
int Reference(const Problem& P, int64_t m, int c) {
  const ConvShape& sh = P.sh;
  const int64_t img = m / (P.oh * P.ow);
  const int px = static_cast<int>(m % (P.oh * P.ow)), oh = px / P.ow, ow = px % P.ow;
  int64_t acc = 0;
  for (int kh = 0; kh < sh.kh; ++kh)
    for (int kw = 0; kw < sh.kw; ++kw)
      for (int ci = 0; ci < sh.c; ++ci) {
        const int ih = oh * sh.s - sh.p + kh, iw = ow * sh.s - sh.p + kw;
        const int xv = ih >= 0 && ih < sh.h && iw >= 0 && iw < sh.w
                           ? P.x[((img * sh.h + ih) * sh.w + iw) * sh.c + ci]
                           : P.xz;
        acc += static_cast<int64_t>(xv) * P.w[c * P.K + (kh * sh.kw + kw) * sh.c + ci];
      }
  double f = static_cast<double>(acc + P.corr[c]) * P.mult[c] + P.bias[c];
  f = f > 0 ? f : 0;
  double q = std::nearbyint(f * P.inv) + P.yz;
  return static_cast<int>(std::min(255.0, std::max(0.0, q)));
}

template <int kBN>
void Launch(const Problem& P, cudaStream_t s) {
  const FusedArgs& a = P.args;
  const unsigned gx = static_cast<unsigned>((a.M + 63) / 64);
  QFusedGemmKernel<false, ALoad::kNhwcVec, kBN><<<dim3(gx, (a.n + kBN - 1) / kBN, 1), kThreads, 0, s>>>(a);
}

template <int kBN>
void Variant(const Problem& P, std::mt19937& rng) {
  cudaStream_t s;
  Check(cudaStreamCreate(&s), "stream");
  const int64_t elems = P.args.M * P.sh.m;
  Check(cudaMemset(P.dy, 0xEE, elems), "poison");
  Launch<kBN>(P, s);
  Check(cudaStreamSynchronize(s), "first launch");
  std::vector<uint8_t> y(elems);
  Check(cudaMemcpy(y.data(), P.dy, elems, cudaMemcpyDeviceToHost), "copy y");
  std::uniform_int_distribution<int64_t> pick(0, elems - 1);
  int off1 = 0, bad = 0;
  for (int t = 0; t < 4096; ++t) {
    const int64_t e = pick(rng);
    const int d = std::abs(static_cast<int>(y[e]) - Reference(P, e / P.sh.m, static_cast<int>(e % P.sh.m)));
    off1 += d == 1;
    bad += d > 1;
  }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> times;
  for (int rep = 0; rep < 7; ++rep) {
    cudaEventRecord(e0, s);
    for (int i = 0; i < 20; ++i) Launch<kBN>(P, s);
    cudaEventRecord(e1, s);
    Check(cudaEventSynchronize(e1), "timing");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    times.push_back(ms * 1000.f / 20.f);
  }
  std::sort(times.begin(), times.end());
  const double us = times[3];
  const double ops = 2.0 * static_cast<double>(P.args.M) * P.sh.m * P.K;
  std::printf("  %-10s BN %3d: %8.2f us  %7.1f TOPS  checked 4096: %d off by 1, %d worse%s\n",
              P.sh.name, kBN, us, ops / us * 1e-6, off1, bad, bad ? "  <-- WRONG" : "");
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(s);
}

}  // namespace

int main(int argc, char** argv) {
  const int batch = argc > 1 ? std::atoi(argv[1]) : 256;
  cudaDeviceProp prop;
  Check(cudaGetDeviceProperties(&prop, 0), "device");
  std::printf("%s, batch %d\n", prop.name, batch);
  const ConvShape shapes[] = {{"atari c1", 4, 84, 84, 32, 8, 8, 4, 0},
                              {"atari c2", 32, 20, 20, 64, 4, 4, 2, 0},
                              {"atari c3", 64, 9, 9, 64, 3, 3, 1, 0},
                              {"impala16", 16, 32, 32, 16, 3, 3, 1, 1},
                              {"impala32", 32, 16, 16, 32, 3, 3, 1, 1}};
  std::mt19937 rng(7);
  for (const ConvShape& sh : shapes) {
    Problem P = Make(sh, batch, rng);
    if (sh.m > 32) Variant<64>(P, rng);
    else Variant<32>(P, rng);
    cudaFree(P.dx);
    cudaFree(P.dpacked);
    cudaFree(P.dy);
  }
  return 0;
}
