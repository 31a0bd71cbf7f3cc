// FusedMlp as cuBLAS GEMMs with a bias/activation epilogue (fused_mlp_gemms.h).
#include "backends/cuda/fused_mlp_gemms.h"

#include <cstdint>

#include "backends/cuda/gemm_util.h"
#include "backends/cuda/half.cuh"

namespace kaiwu {
namespace cuda {
namespace {

size_t Align256(size_t v) { return (v + 255) / 256 * 256; }

template <typename T>
__global__ void MlpCastInKernel(T* out, const float* x, int64_t total) {
  KAIWU_CUDA_LOOP(i, total) out[i] = FromFloat<T>(x[i]);
}

// v = act(acc + b[col]); written to `keep` (16-bit, may be acc itself) and/or y.
template <typename T>
__global__ void MlpEpilogueKernel(const T* acc, int64_t total, int64_t cols, const T* b,
                                  DeviceActivation act, T* keep, void* y, int y_float) {
  KAIWU_CUDA_LOOP(i, total) {
    float v = ToFloat(acc[i]);
    if (b) v += ToFloat(b[i % cols]);
    v = act(v);
    if (keep) keep[i] = FromFloat<T>(v);
    if (y) {
      if (y_float)
        static_cast<float*>(y)[i] = v;
      else
        static_cast<T*>(y)[i] = FromFloat<T>(v);
    }
  }
}

// The same, eight columns a thread (cols % 8 == 0, every pointer 16-byte
// aligned): 16-byte loads and stores, one bias pack per eight outputs.
template <typename T>
__global__ void MlpEpilogue8Kernel(const T* acc, int64_t packs, int64_t col_packs, const T* b,
                                   DeviceActivation act, T* keep, void* y, int y_float) {
  KAIWU_CUDA_LOOP(i, packs) {
    const uint4 a = reinterpret_cast<const uint4*>(acc)[i];
    const T* av = reinterpret_cast<const T*>(&a);
    uint4 bp = make_uint4(0, 0, 0, 0);
    if (b) bp = reinterpret_cast<const uint4*>(b)[i % col_packs];
    const T* bv = reinterpret_cast<const T*>(&bp);
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      v[j] = ToFloat(av[j]);
      if (b) v[j] += ToFloat(bv[j]);
      v[j] = act(v[j]);
    }
    uint4 h;
    T* hv = reinterpret_cast<T*>(&h);
#pragma unroll
    for (int j = 0; j < 8; ++j) hv[j] = FromFloat<T>(v[j]);
    if (keep) reinterpret_cast<uint4*>(keep)[i] = h;
    if (!y) continue;
    if (y_float) {
      float4* yf = static_cast<float4*>(y) + 2 * i;
      yf[0] = make_float4(v[0], v[1], v[2], v[3]);
      yf[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
      static_cast<uint4*>(y)[i] = h;
    }
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

MlpGemmPlan PlanMlpGemms(const FusedMlpParams& p, bool x_float, int64_t k0, cudaDataType_t type,
                         const std::vector<bool>& y_float) {
  MlpGemmPlan plan;
  plan.m = p.m;
  plan.k0 = k0;
  plan.x_float = x_float;
  size_t off = 0;
  if (x_float) {
    plan.x_buf = off;
    off += Align256(static_cast<size_t>(p.m * k0) * 2);
  }
  for (const auto& L : p.layers) {
    MlpGemmPlan::Layer d;
    d.input = L.input;
    d.trans_b = L.trans_b;
    d.has_bias = L.has_bias;
    d.k = L.k;
    d.n = L.n;
    d.act = DeviceActivation::From(L.act);
    d.buf = off;
    off += Align256(static_cast<size_t>(p.m * L.n) * 2);
    plan.layers.push_back(d);
  }
  for (const auto& L : p.layers)
    if (L.input >= 0) plan.layers[L.input].kept = true;
  std::vector<bool> output(p.layers.size(), false);
  for (int o : p.output_layers) output[o] = true;
  using K = FusedActivation::Kind;
  for (size_t l = 0; l < plan.layers.size(); ++l) {
    MlpGemmPlan::Layer& d = plan.layers[l];
    const K act = p.layers[l].act.kind;
    // One destination in 16 bits: the scratch rows, or the output alone.
    const bool one_place = d.kept != output[l] && !(output[l] && y_float[l]);
    if (one_place && (d.has_bias || act == K::kRelu) && (act == K::kNone || act == K::kRelu))
      d.lt.Plan(type, false, d.trans_b, p.m, d.n, d.k, d.k, d.trans_b ? d.k : d.n, d.n, d.has_bias,
                act == K::kRelu);
  }
  plan.scratch_bytes = off;
  return plan;
}

template <typename T>
void RunMlpGemms(const DeviceContext& dev, const MlpGemmPlan& plan, const void* x, const void* const* w,
                 const void* const* b, void* const* y, const std::vector<bool>& y_float, void* scratch) {
  char* s = static_cast<char*>(scratch);
  const int64_t m = plan.m;
  const T* xh = static_cast<const T*>(x);
  if (plan.x_float) {
    T* xb = reinterpret_cast<T*>(s + plan.x_buf);
    const int64_t total = m * plan.k0;
    MlpCastInKernel<T><<<GridFor(total), kBlock, 0, dev.stream>>>(xb, static_cast<const float*>(x), total);
    CheckLaunch("FusedMlp input cast kernel");
    xh = xb;
  }
  for (size_t l = 0; l < plan.layers.size(); ++l) {
    const MlpGemmPlan::Layer& L = plan.layers[l];
    const T* in = L.input < 0 ? xh : reinterpret_cast<const T*>(s + plan.layers[L.input].buf);
    T* acc = reinterpret_cast<T*>(s + L.buf);
    const T* bias = L.has_bias ? static_cast<const T*>(b[l]) : nullptr;
    if (L.lt.planned() && L.lt.Run(dev, 1.f, in, w[l], L.kept ? acc : y[l], bias)) continue;
    // Nothing to add or apply, one 16-bit destination: the GEMM writes there.
    const bool direct = !bias && !L.act.active() && L.kept != (y[l] != nullptr) && !y_float[l];
    RowMajorGemm<T>(dev, false, L.trans_b, m, L.n, L.k, 1.f, in, L.k, static_cast<const T*>(w[l]),
                    L.trans_b ? L.k : L.n, direct && !L.kept ? static_cast<T*>(y[l]) : acc, L.n);
    if (direct) continue;
    const int64_t total = m * L.n;
    if (!L.kept && !y[l]) continue;
    if (L.n % 8 == 0 && Aligned16(acc) && Aligned16(bias) && Aligned16(y[l]))
      MlpEpilogue8Kernel<T><<<GridFor(total / 8), kBlock, 0, dev.stream>>>(
          acc, total / 8, L.n / 8, bias, L.act, L.kept ? acc : nullptr, y[l], y_float[l] ? 1 : 0);
    else
      MlpEpilogueKernel<T><<<GridFor(total), kBlock, 0, dev.stream>>>(
          acc, total, L.n, bias, L.act, L.kept ? acc : nullptr, y[l], y_float[l] ? 1 : 0);
    CheckLaunch("FusedMlp epilogue kernel");
  }
}

template void RunMlpGemms<__half>(const DeviceContext&, const MlpGemmPlan&, const void*, const void* const*,
                                  const void* const*, void* const*, const std::vector<bool>&, void*);
template void RunMlpGemms<__nv_bfloat16>(const DeviceContext&, const MlpGemmPlan&, const void*,
                                         const void* const*, const void* const*, void* const*,
                                         const std::vector<bool>&, void*);

}  // namespace cuda
}  // namespace kaiwu
