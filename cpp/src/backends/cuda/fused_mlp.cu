// FusedMlp (ops/linalg.h FusedMlpParams) on CUDA: a small dense network in one
// launch. A block owns 16 * MT rows of X; each layer's input rows live in
// shared memory in the weights' 16-bit type (K padded to 16 with zeros, rows
// padded by 8 elements so the fragment loads hit 32 distinct banks); warps
// take the layer's 8-column tiles in turn and run mma.m16n8k16 (16-bit
// operands, float32 accumulation), each layer's weights first staged in shared
// memory by the whole block with asynchronous 16-byte copies (rows padded like the inputs),
// since fragment-order loads straight from global memory touch eight lines per
// instruction and left the block waiting on L2; then add the bias, apply the activation
// in float and write the tile to shared memory for later layers and/or to the
// layer's output (float32 or 16-bit). One launch replaces a GEMM and a
// bias/activation kernel per layer and the casts at the network's edges.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/half_util.cuh"
#include "ops/linalg.h"

namespace kaiwu {
namespace cuda {
namespace {

constexpr int kMlpThreads = 512;
constexpr int kMlpWarps = kMlpThreads / 32;
constexpr int kMlpMaxLayers = 8;
constexpr int64_t kMlpMaxSmem = 220 * 1024;

struct MlpLayerArgs {
  const uint16_t* w = nullptr;  // [N, K] (trans_b) or [K, N], 16-bit
  const uint16_t* b = nullptr;  // [N] or null
  int k = 0, n = 0, kp = 0;     // kp: K rounded up to 16
  int trans_b = 1;
  int vec16 = 0;  // W [N, K], K % 8 == 0, 16-byte aligned: staged in 16-byte loads
  int in_off = 0, in_stride = 0;    // input rows in shared memory (elements)
  int out_off = -1, out_stride = 0;  // this layer's rows kept for later layers (-1: not kept)
  DeviceActivation act;
  void* y = nullptr;  // the node's output of this layer, or null
  int y_float = 0;
};

struct MlpArgs {
  const void* x = nullptr;
  int x_float = 0;
  int64_t m = 0;
  int k0 = 0, x_stride = 0;
  int layers = 0;
  int smem_elems = 0;  // the row buffers (zeroed at start)
  int w_off = 0;       // the weight stage: [round8(N)][kp + 8] of the layer at hand
  MlpLayerArgs layer[kMlpMaxLayers];
};

template <typename T>
__device__ __forceinline__ void Mma16816(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Stages W as [n][k] rows of kp + 8 elements at `ws`, zeros in [K, kp).
__device__ __forceinline__ void StageWeights(const MlpLayerArgs& L, uint16_t* ws, int tid) {
  const int wst = L.kp + 8;
  if (L.vec16) {
    const int chunks = L.k / 8;
    const uint4* src = reinterpret_cast<const uint4*>(L.w);
    // Asynchronous copies: all of a thread's 16-byte loads in flight at once.
    for (int i = tid; i < L.n * chunks; i += kMlpThreads) {
      const int n = i / chunks, c = i - n * chunks;
      __pipeline_memcpy_async(ws + n * wst + c * 8, src + i, 16);
    }
    __pipeline_commit();
  } else if (L.trans_b) {
    for (int i = tid; i < L.n * L.k; i += kMlpThreads) {
      const int n = i / L.k, k = i - n * L.k;
      ws[n * wst + k] = __ldg(L.w + i);
    }
  } else {  // [K, N]: read along N (coalesced), write transposed
    for (int i = tid; i < L.n * L.k; i += kMlpThreads) {
      const int k = i / L.n, n = i - k * L.n;
      ws[n * wst + k] = __ldg(L.w + i);
    }
  }
  const int pad = L.kp - L.k;
  for (int i = tid; i < L.n * pad; i += kMlpThreads) {
    const int n = i / pad;
    ws[n * wst + L.k + (i - n * pad)] = 0;
  }
  if (L.vec16) __pipeline_wait_prior(0);  // this thread's copies; the caller's barrier publishes them
}

template <typename T, int MT>
__global__ void __launch_bounds__(kMlpThreads) FusedMlpKernel(MlpArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sm = reinterpret_cast<T*>(smem_raw);
  constexpr int kRows = 16 * MT;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  // Zeros first: K padding and rows past M read as 0 in every layer.
  for (int i = tid; i < a.smem_elems; i += kMlpThreads) sm[i] = Store<T>(0.f);
  __syncthreads();
  for (int i = tid; i < kRows * a.k0; i += kMlpThreads) {
    const int r = i / a.k0, c = i - r * a.k0;
    const int64_t gr = r0 + r;
    if (gr >= a.m) break;
    const float v = a.x_float ? static_cast<const float*>(a.x)[gr * a.k0 + c]
                              : Load(static_cast<const T*>(a.x)[gr * a.k0 + c]);
    sm[r * a.x_stride + c] = Store<T>(v);
  }
  __syncthreads();
  for (int l = 0; l < a.layers; ++l) {
    const MlpLayerArgs& L = a.layer[l];
    const T* in = sm + L.in_off;
    const int ntiles = (L.n + 7) / 8, ktiles = L.kp / 16;
    uint16_t* ws = reinterpret_cast<uint16_t*>(sm + a.w_off);
    StageWeights(L, ws, tid);
    __syncthreads();
    const int wst = L.kp + 8;
    for (int nt = warp; nt < ntiles; nt += kMlpWarps) {
      float c[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) c[mt][0] = c[mt][1] = c[mt][2] = c[mt][3] = 0.f;
      const int n = nt * 8 + gid;
      const bool n_ok = n < L.n;
      const uint16_t* wrow = ws + n * wst + 2 * tig;
#pragma unroll 4
      for (int kt = 0; kt < ktiles; ++kt) {
        const uint32_t b0 = n_ok ? *reinterpret_cast<const uint32_t*>(wrow + kt * 16) : 0u;
        const uint32_t b1 = n_ok ? *reinterpret_cast<const uint32_t*>(wrow + kt * 16 + 8) : 0u;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const T* a_lo = in + (mt * 16 + gid) * L.in_stride + kt * 16 + 2 * tig;
          const T* a_hi = a_lo + 8 * L.in_stride;
          Mma16816<T>(c[mt], *reinterpret_cast<const uint32_t*>(a_lo), *reinterpret_cast<const uint32_t*>(a_hi),
                      *reinterpret_cast<const uint32_t*>(a_lo + 8), *reinterpret_cast<const uint32_t*>(a_hi + 8),
                      b0, b1);
        }
      }
      // c[mt][2h + e]: row mt * 16 + gid + 8h, column nt * 8 + 2 tig + e.
#pragma unroll 1
      for (int e = 0; e < 2; ++e) {
        const int col = nt * 8 + 2 * tig + e;
        if (col >= L.n) continue;
        const float bias = L.b ? Load(reinterpret_cast<const T*>(L.b)[col]) : 0.f;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = mt * 16 + gid + 8 * h;
            const float v = L.act(c[mt][2 * h + e] + bias);
            if (L.out_off >= 0) sm[L.out_off + r * L.out_stride + col] = Store<T>(v);
            const int64_t gr = r0 + r;
            if (L.y && gr < a.m) {
              if (L.y_float)
                static_cast<float*>(L.y)[gr * L.n + col] = v;
              else
                static_cast<T*>(L.y)[gr * L.n + col] = Store<T>(v);
            }
          }
      }
    }
    __syncthreads();
  }
}

int64_t Round16(int64_t v) { return (v + 15) / 16 * 16; }

template <typename T>
class FusedMlpCudaKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    if (args_.m == 0) return;
    MlpArgs a = args_;
    a.x = io.inputs[0];
    for (int l = 0; l < a.layers; ++l) {
      a.layer[l].w = static_cast<const uint16_t*>(io.inputs[1 + 2 * l]);
      if (reinterpret_cast<uintptr_t>(a.layer[l].w) % 16 != 0) a.layer[l].vec16 = 0;
      a.layer[l].b = has_bias_[l] ? static_cast<const uint16_t*>(io.inputs[2 + 2 * l]) : nullptr;
      a.layer[l].y = nullptr;
    }
    for (size_t o = 0; o < output_layers_.size(); ++o) a.layer[output_layers_[o]].y = io.outputs[o];
    const int rows = 16 * mt_;
    const unsigned grid = static_cast<unsigned>((a.m + rows - 1) / rows);
    const DeviceContext& dev = Dev(io);
    if (mt_ == 4)
      FusedMlpKernel<T, 4><<<grid, kMlpThreads, smem_bytes_, dev.stream>>>(a);
    else
      FusedMlpKernel<T, 1><<<grid, kMlpThreads, smem_bytes_, dev.stream>>>(a);
    CheckLaunch("FusedMlp kernel");
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const FusedMlpParams& p = ctx.Params<FusedMlpParams>();
    const int layers = static_cast<int>(p.layers.size());
    if (layers > kMlpMaxLayers)
      Unsupported(ctx, layers, " layers (the CUDA kernel takes up to ", kMlpMaxLayers, ")");
    std::vector<bool> kept(layers, false);
    for (const auto& L : p.layers)
      if (L.input >= 0) kept[L.input] = true;
    MlpArgs a;
    a.m = p.m;
    a.layers = layers;
    a.x_float = ctx.in(0).dtype == DType::kFloat32;
    a.k0 = static_cast<int>(ctx.in(0).shape[1]);
    // Shared memory per row, in elements: X, then each kept layer's output.
    int64_t per_row = 0;
    a.x_stride = static_cast<int>(Round16(a.k0) + 8);
    per_row += a.x_stride;
    std::vector<int> off(layers, -1), stride(layers, 0);
    for (int l = 0; l < layers; ++l) {
      if (!kept[l]) continue;
      stride[l] = static_cast<int>(Round16(p.layers[l].n) + 8);
      off[l] = static_cast<int>(per_row);  // times the block's rows, below
      per_row += stride[l];
    }
    has_bias_.assign(layers, false);
    // Blocks of 64 rows only when 16-row blocks would fill the GPU twice over
    // (each block reads every weight once).
    int device = 0, sms = 132;
    if (cudaGetDevice(&device) == cudaSuccess)
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    int64_t stage = 0;  // the largest layer's staged weights, elements
    for (const auto& L : p.layers) stage = std::max(stage, (L.n + 7) / 8 * 8 * (Round16(L.k) + 8));
    const auto bytes = [&](int64_t rows) { return static_cast<int64_t>(rows * per_row + stage) * 2; };
    mt_ = (p.m + 15) / 16 > 2 * sms && bytes(64) <= kMlpMaxSmem ? 4 : 1;
    const int rows = 16 * mt_;
    smem_bytes_ = static_cast<size_t>(bytes(rows));
    if (static_cast<int64_t>(smem_bytes_) > kMlpMaxSmem)
      Unsupported(ctx, "layers too wide for shared memory (", smem_bytes_, " bytes)");
    a.smem_elems = static_cast<int>(rows * per_row);
    a.w_off = a.smem_elems;
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
      has_bias_[l] = L.has_bias;
    }
    output_layers_ = p.output_layers;
    for (size_t o = 0; o < output_layers_.size(); ++o)
      a.layer[output_layers_[o]].y_float = ctx.outputs[o].dtype == DType::kFloat32;
    args_ = a;
    if (smem_bytes_ > 48 * 1024) {
      const cudaError_t e =
          mt_ == 4 ? cudaFuncSetAttribute(FusedMlpKernel<T, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem_bytes_))
                   : cudaFuncSetAttribute(FusedMlpKernel<T, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem_bytes_));
      CheckCuda(e, "FusedMlp shared memory size");
    }
  }

 private:
  MlpArgs args_;
  int mt_ = 1;
  size_t smem_bytes_ = 0;
  std::vector<bool> has_bias_;
  std::vector<int> output_layers_;
};

}  // namespace

void RegisterFusedMlpKernel(KernelRegistry& r) {
  r.Register(OpId::kFusedMlp, DType::kFloat16, &MakeKernel<FusedMlpCudaKernel<__half>>);
  r.Register(OpId::kFusedMlp, DType::kBFloat16, &MakeKernel<FusedMlpCudaKernel<__nv_bfloat16>>);
}

}  // namespace cuda
}  // namespace kaiwu
