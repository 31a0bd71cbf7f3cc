// FusedMlp (ops/linalg.h FusedMlpParams) on CUDA: a small dense network in one
// launch. Two kernels: the cluster kernel (fused_mlp_cluster.cuh) splits each
// layer's columns over a cluster of 2-16 blocks sharing 16 * MT rows, so that
// the weights load through many SMs; the one-block kernel (fused_mlp_kernel.cuh)
// runs all of a block's rows on one SM, the better choice once the row blocks
// alone fill the GPU, and the fallback where the cluster kernel cannot run
// (pre-Hopper device, slices past shared memory, no cluster fits).
// KAIWU_FUSED_MLP_CLUSTER=0 keeps the one-block kernel, =C (2, 4, 8, 16) or
// C:MT forces that cluster (A/B and tests). Past the node's max_rows the layers
// run as cuBLAS GEMMs instead (fused_mlp_gemms.h); KAIWU_FUSED_MLP_SINGLE_ROWS=R sets
// it for the one-layer nodes that have one (the wide groups); KAIWU_FUSED_MLP_ROWS=R sets
// that limit for every node (0: none), for A/B and tests.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/fused_mlp_cluster.cuh"
#include "backends/cuda/fused_mlp_gemms.h"
#include "backends/cuda/gemm_util.h"
#include "backends/cuda/half.cuh"
#include "backends/cuda/fused_mlp_kernel.cuh"
#include "ops/linalg.h"

namespace kaiwu {
namespace cuda {
namespace {

int64_t Round16(int64_t v) { return (v + 15) / 16 * 16; }

/// A launch of one of the two kernels, its arguments without the tensors' pointers.
struct MlpPlan {
  MlpArgs args;
  int cluster = 0;    // 0: the one-block kernel; else blocks per cluster
  int mt = 1;         // rows per block (cluster) are 16 * mt
  int64_t smem = 0;   // dynamic shared memory, bytes (over kMlpMaxSmem: does not fit)
  unsigned grid = 0;  // blocks
};

/// Lays out shared memory and the arguments for `cluster` blocks per cluster
/// (0: the one-block kernel) and 16 * mt rows per block (mt 0: the one-block
/// kernel's own choice, 1 or 4).
MlpPlan PlanFusedMlp(const FusedMlpParams& p, bool x_float, int k0, int sms, int cluster, int mt) {
  MlpPlan plan;
  MlpArgs& a = plan.args;
  const int layers = static_cast<int>(p.layers.size());
  std::vector<bool> kept(layers, false);
  for (const auto& L : p.layers)
    if (L.input >= 0) kept[L.input] = true;
  a.m = p.m;
  a.layers = layers;
  a.x_float = x_float ? 1 : 0;
  a.k0 = k0;
  // Shared memory per row, in elements: X, then each kept layer's output.
  a.x_stride = static_cast<int>(Round16(k0) + 8);
  int64_t per_row = a.x_stride;
  std::vector<int> off(layers, -1), stride(layers, 0);
  for (int l = 0; l < layers; ++l) {
    if (!kept[l]) continue;
    stride[l] = static_cast<int>(Round16(p.layers[l].n) + 8);
    off[l] = static_cast<int>(per_row);  // times the block's rows, below
    per_row += stride[l];
  }
  if (cluster == 0) {
    // Blocks of 64 rows only when 16-row blocks would fill the GPU twice over
    // (each block reads every weight once).
    int64_t stage = 0;  // the largest layer's staged weights, elements
    for (const auto& L : p.layers) stage = std::max(stage, (L.n + 7) / 8 * 8 * (Round16(L.k) + 8));
    const auto bytes = [&](int64_t rows) { return (rows * per_row + stage) * 2; };
    if (mt == 0) mt = (p.m + 15) / 16 > 2 * sms && bytes(64) <= kMlpMaxSmem ? 4 : 1;
    plan.smem = bytes(16 * mt);
  }
  const int rows = 16 * mt;
  plan.cluster = cluster;
  plan.mt = mt;
  a.smem_elems = static_cast<int>(rows * per_row);
  a.w_off = a.smem_elems;
  std::vector<int> phase(layers, 0);
  for (int l = 0; l < layers; ++l) {
    const FusedMlpParams::Layer& L = p.layers[l];
    MlpLayerArgs& d = a.layer[l];
    d.k = static_cast<int>(L.k);
    d.n = static_cast<int>(L.n);
    d.kp = static_cast<int>(Round16(L.k));
    d.trans_b = L.trans_b ? 1 : 0;
    d.vec16 = L.trans_b && L.k % 8 == 0 ? 1 : 0;
    d.in_off = L.input < 0 ? 0 : rows * off[L.input];
    d.in_stride = L.input < 0 ? a.x_stride : stride[L.input];
    d.out_off = kept[l] ? rows * off[l] : -1;
    d.out_stride = stride[l];
    d.act = DeviceActivation::From(L.act);
    phase[l] = L.input < 0 ? 0 : phase[L.input] + 1;  // a layer reads an earlier one
  }
  const int64_t row_blocks = (p.m + rows - 1) / rows;
  plan.grid = static_cast<unsigned>(row_blocks * std::max(cluster, 1));
  if (cluster == 0) return plan;
  // Cluster kernel: phases, each layer's tiles within its phase, the slices.
  a.cluster = cluster;
  a.phases = *std::max_element(phase.begin(), phase.end()) + 1;
  std::vector<int> last(a.phases, 0);
  for (int l = 0; l < layers; ++l) {
    MlpLayerArgs& d = a.layer[l];
    d.phase = phase[l];
    d.tile0 = a.phase_tiles[d.phase];
    a.phase_tiles[d.phase] += (d.n + 7) / 8;
    last[d.phase] = l;
    if (kept[l]) a.phase_sync[d.phase] = 1;
  }
  int64_t elems = a.smem_elems, floats = 0;
  for (int l = 0; l < layers; ++l) a.layer[l].ptiles = a.phase_tiles[phase[l]];
  for (int q = 0; q < a.phases; ++q) a.phase_pending[q] = layers - 1 - last[q];
  for (int l = 0; l < layers; ++l) {
    MlpLayerArgs& d = a.layer[l];
    // The most tiles of this layer one rank stages.
    int most = 0;
    for (int r = 0; r < cluster; ++r) {
      int lo, hi, n0, n1;
      RankTiles(a.phase_tiles[d.phase], cluster, r, &lo, &hi);
      SliceColumns(d, lo, hi, &n0, &n1);
      most = std::max(most, (n1 - n0 + 7) / 8);
    }
    d.ws_off = static_cast<int>(elems);
    elems += static_cast<int64_t>(most) * 8 * (d.kp + 8);
    d.bias_off = static_cast<int>(floats);
    floats += most * 8;
  }
  a.bias_smem = static_cast<int>((elems * 2 + 15) / 16 * 16);
  plan.smem = a.bias_smem + floats * 4;
  return plan;
}

/// The cluster the shapes call for, as {blocks per cluster, mt}, or {0, 0}
/// for the one-block kernel (bench/notes/cuda.md, the mlp on an H100): 8
/// blocks up to 8 row blocks of 16, 4 up to 32, 2 up to 66 (one block per SM),
/// never more blocks than the widest phase has 8-column tiles; past that the
/// one-block kernel.
std::pair<int, int> AutoCluster(const FusedMlpParams& p, int sms) {
  std::vector<int> phase(p.layers.size(), 0), tiles(p.layers.size(), 0);
  int most_tiles = 0;
  for (size_t l = 0; l < p.layers.size(); ++l) {
    phase[l] = p.layers[l].input < 0 ? 0 : phase[p.layers[l].input] + 1;
    tiles[phase[l]] += static_cast<int>((p.layers[l].n + 7) / 8);
    most_tiles = std::max(most_tiles, tiles[phase[l]]);
  }
  const int64_t row_blocks = (p.m + 15) / 16;
  int c = row_blocks <= 8 ? 8 : row_blocks <= 32 ? 4 : 2;
  while (c > 2 && c > most_tiles) c /= 2;
  if (row_blocks * c > sms || most_tiles < 2) return {0, 0};
  return {c, 1};
}

template <typename T>
cudaError_t LaunchFusedMlp(const MlpPlan& plan, const MlpArgs& a, cudaStream_t stream) {
  if (plan.cluster == 0) {
    if (plan.mt == 4)
      FusedMlpKernel<T, 4><<<plan.grid, kMlpThreads, plan.smem, stream>>>(a);
    else
      FusedMlpKernel<T, 1><<<plan.grid, kMlpThreads, plan.smem, stream>>>(a);
    return cudaGetLastError();
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(plan.grid);
  cfg.blockDim = dim3(kMlpClusterThreads);
  cfg.dynamicSmemBytes = static_cast<size_t>(plan.smem);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(plan.cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  switch (plan.mt) {
    case 4: return cudaLaunchKernelEx(&cfg, FusedMlpClusterKernel<T, 4>, a);
    case 2: return cudaLaunchKernelEx(&cfg, FusedMlpClusterKernel<T, 2>, a);
    default: return cudaLaunchKernelEx(&cfg, FusedMlpClusterKernel<T, 1>, a);
  }
}

/// Sets the kernel's shared-memory limit (and non-portable cluster sizes);
/// for a cluster, cudaErrorNotSupported unless one fits on the device.
template <typename T>
cudaError_t ConfigureFusedMlp(const MlpPlan& plan, int* active_clusters = nullptr) {
  const void* fn = nullptr;
  if (plan.cluster == 0)
    fn = plan.mt == 4 ? reinterpret_cast<const void*>(FusedMlpKernel<T, 4>)
                      : reinterpret_cast<const void*>(FusedMlpKernel<T, 1>);
  else
    fn = plan.mt == 4   ? reinterpret_cast<const void*>(FusedMlpClusterKernel<T, 4>)
         : plan.mt == 2 ? reinterpret_cast<const void*>(FusedMlpClusterKernel<T, 2>)
                        : reinterpret_cast<const void*>(FusedMlpClusterKernel<T, 1>);
  // The limit is the function's, shared by every node: raise it, never lower it.
  cudaFuncAttributes attrs = {};
  cudaError_t e = cudaFuncGetAttributes(&attrs, fn);
  if (e == cudaSuccess && attrs.maxDynamicSharedSizeBytes < plan.smem)
    e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(plan.smem));
  if (e != cudaSuccess || plan.cluster == 0) return e;
  if (plan.cluster > 8 && (e = cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1)) != cudaSuccess)
    return e;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(plan.cluster);
  cfg.blockDim = dim3(kMlpClusterThreads);
  cfg.dynamicSmemBytes = static_cast<size_t>(plan.smem);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(plan.cluster);
  attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  if ((e = cudaOccupancyMaxActiveClusters(&clusters, fn, &cfg)) != cudaSuccess) return e;
  if (active_clusters) *active_clusters = clusters;
  // All clusters at once, or the one-block kernel (a second wave of clusters doubles the time).
  return clusters > 0 && static_cast<int64_t>(plan.grid) <= static_cast<int64_t>(clusters) * plan.cluster
             ? cudaSuccess
             : cudaErrorNotSupported;
}

template <typename T>
class FusedMlpCudaKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    if (plan_.args.m == 0) return;
    if (gemms_) {
      const size_t layers = gemm_plan_.layers.size();
      const void* w[kMlpMaxLayers] = {};
      const void* b[kMlpMaxLayers] = {};
      void* y[kMlpMaxLayers] = {};
      for (size_t l = 0; l < layers; ++l) {
        w[l] = io.inputs[1 + 2 * l];
        b[l] = has_bias_[l] ? io.inputs[2 + 2 * l] : nullptr;
      }
      for (size_t o = 0; o < output_layers_.size(); ++o) y[output_layers_[o]] = io.outputs[o];
      RunMlpGemms<T>(Dev(io), gemm_plan_, io.inputs[0], w, b, y, y_float_, io.scratch);
      return;
    }
    MlpArgs a = plan_.args;
    a.x = io.inputs[0];
    for (int l = 0; l < a.layers; ++l) {
      a.layer[l].w = static_cast<const uint16_t*>(io.inputs[1 + 2 * l]);
      if (reinterpret_cast<uintptr_t>(a.layer[l].w) % 16 != 0) a.layer[l].vec16 = 0;
      a.layer[l].b = has_bias_[l] ? static_cast<const uint16_t*>(io.inputs[2 + 2 * l]) : nullptr;
      a.layer[l].y = nullptr;
    }
    for (size_t o = 0; o < output_layers_.size(); ++o) a.layer[output_layers_[o]].y = io.outputs[o];
    CheckCuda(LaunchFusedMlp<T>(plan_, a, Dev(io).stream), "FusedMlp kernel");
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const FusedMlpParams& p = ctx.Params<FusedMlpParams>();
    const int layers = static_cast<int>(p.layers.size());
    if (layers > kMlpMaxLayers)
      Unsupported(ctx, layers, " layers (the CUDA kernel takes up to ", kMlpMaxLayers, ")");
    int device = 0, sms = 132, major = 0;
    if (cudaGetDevice(&device) == cudaSuccess) {
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    }
    const bool x_float = ctx.in(0).dtype == DType::kFloat32;
    const int k0 = static_cast<int>(ctx.in(0).shape.back());
    has_bias_.assign(layers, false);
    for (int l = 0; l < layers; ++l) has_bias_[l] = p.layers[l].has_bias;
    output_layers_ = p.output_layers;
    y_float_.assign(layers, false);
    for (size_t o = 0; o < output_layers_.size(); ++o)
      y_float_[output_layers_[o]] = ctx.outputs[o].dtype == DType::kFloat32;
    int64_t max_rows = p.max_rows;
    if (const char* env = std::getenv("KAIWU_FUSED_MLP_ROWS")) max_rows = std::atoll(env);
    // A/B of the one-layer groups' limit (passes/fuse_mlp.h) alone.
    if (const char* env = std::getenv("KAIWU_FUSED_MLP_SINGLE_ROWS"); env && layers == 1 && p.max_rows > 0)
      max_rows = std::atoll(env);
    gemms_ = max_rows > 0 && p.m > max_rows;
    if (gemms_) {
      CheckBlasInt(ctx, p.m, "M");
      gemm_plan_ = PlanMlpGemms(p, x_float, k0, CudaDataType<T>::value, y_float_);
      ctx.scratch_bytes = gemm_plan_.scratch_bytes;
      plan_.args.m = p.m;
      return;
    }
    std::pair<int, int> want = major >= 9 ? AutoCluster(p, sms) : std::pair<int, int>{0, 0};
    if (const char* env = std::getenv("KAIWU_FUSED_MLP_CLUSTER"); env && major >= 9) {
      const int c = std::atoi(env);
      const char* colon = std::strchr(env, ':');
      const int mt = colon ? std::atoi(colon + 1) : 1;
      want = c >= 2 && c <= kMlpMaxCluster && (c & (c - 1)) == 0 && (mt == 1 || mt == 2 || mt == 4)
                 ? std::pair<int, int>{c, mt}
                 : std::pair<int, int>{0, 0};
    }
    plan_ = PlanFusedMlp(p, x_float, k0, sms, 0, 0);
    if (plan_.smem > kMlpMaxSmem)
      Unsupported(ctx, "layers too wide for shared memory (", plan_.smem, " bytes)");
    if (want.first > 0) {
      const MlpPlan c = PlanFusedMlp(p, x_float, k0, sms, want.first, want.second);
      if (c.smem <= kMlpMaxSmem && ConfigureFusedMlp<T>(c) == cudaSuccess) plan_ = c;
      cudaGetLastError();  // a refused cluster leaves the one-block kernel
    }
    if (plan_.cluster == 0) CheckCuda(ConfigureFusedMlp<T>(plan_), "FusedMlp shared memory size");
    for (size_t o = 0; o < output_layers_.size(); ++o)
      plan_.args.layer[output_layers_[o]].y_float = y_float_[output_layers_[o]];
  }

 private:
  MlpPlan plan_;
  bool gemms_ = false;  // past max_rows: the layers as cuBLAS GEMMs
  MlpGemmPlan gemm_plan_;
  std::vector<bool> has_bias_, y_float_;
  std::vector<int> output_layers_;
};

}  // namespace

void RegisterFusedMlpKernel(KernelRegistry& r) {
  r.Register(OpId::kFusedMlp, DType::kFloat16, &MakeKernel<FusedMlpCudaKernel<__half>>);
  r.Register(OpId::kFusedMlp, DType::kBFloat16, &MakeKernel<FusedMlpCudaKernel<__nv_bfloat16>>);
}

}  // namespace cuda
}  // namespace kaiwu
