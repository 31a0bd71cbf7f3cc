// The direct channels-last tensor-core conv (conv_direct.h).
//
// Shared memory of one block, in 16-bit elements unless said:
//   W     [nt * 8][kh * kw * cp + 8]   the weight, channels c..cp and rows m..nt*8 zero
//   X     [in_rows][in_cols][cp + 8]   the input window of the tile at hand
//   Y     [th * tw][nt * 8 + 4] float  the tile's accumulators plus bias
// Rows padded by 8 elements (16 bytes) hold an odd number of 16-byte chunks,
// so the eight row addresses of one ldmatrix phase fall in distinct banks.
//
// Warp w owns output pixels [32 w, 32 w + 32) of the tile (two 16-row MMA
// blocks) and all of its output channels. For tap (r, s) and channel block
// k0, lane l's A row is pixel p = 32 w + 16 j + (l & 15), read at window
// pixel (py * stride_h + r, px * stride_w + s), channels k0 + 8 (l >> 4):
// ldmatrix.x4 then hands each lane its m16n8k16 A fragment.
#include "backends/cuda/conv_direct.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/half.cuh"
#include "backends/cuda/half_util.cuh"

namespace kaiwu {
namespace cuda {
namespace {

// Most dynamic shared memory a block may ask for (H100: 227 KB; two blocks an SM fit).
constexpr size_t kMaxSmem = 110 * 1024;

struct Geometry {
  int h, w, c, m, oh, ow, kh, kw, sh, sw, ph, pw;
  int th, tw, tiles_y, tiles_x, in_rows, in_cols;
  long long tiles;
};

__device__ __forceinline__ void LdMatrixX4(uint32_t* r, const void* p) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// Eight 16-bit values as one 16-byte chunk.
struct alignas(16) Chunk8 {
  uint16_t v[8];
};

// Copies 8 channels from `src` (n valid of them, 16-byte aligned when n == 8 and
// vec) into `dst` (16-byte aligned), zeros after n, max(v, 0) when relu.
template <typename T>
__device__ __forceinline__ void StageChunk(const T* src, int n, bool vec, bool relu, uint16_t* dst) {
  Chunk8 ch;
  if (vec && n == 8) {
    ch = *reinterpret_cast<const Chunk8*>(src);
  } else {
    const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
#pragma unroll
    for (int i = 0; i < 8; ++i) ch.v[i] = i < n ? s[i] : uint16_t{0};
  }
  if (relu) {
#pragma unroll
    for (int i = 0; i < 8; ++i) ch.v[i] = Load(FromBits<T>(ch.v[i])) > 0.f ? ch.v[i] : uint16_t{0};
  }
  *reinterpret_cast<Chunk8*>(dst) = ch;
}

template <typename T, int CP, int NT>
__global__ void __launch_bounds__(128) DirectConvKernel(Geometry g, const T* __restrict__ x,
                                                        const T* __restrict__ wt,
                                                        const T* __restrict__ bias,
                                                        const T* __restrict__ sum, T* __restrict__ y,
                                                        DeviceActivation act, bool input_relu) {
  constexpr int kRow = CP + 8;  // window pixel stride
  constexpr int kN = NT * 8;
  constexpr int kOut = kN + 4;  // float tile row stride
  extern __shared__ __align__(16) unsigned char smem[];
  const int taps = g.kh * g.kw;
  const int wrow = taps * CP + 8;
  uint16_t* ws = reinterpret_cast<uint16_t*>(smem);
  uint16_t* xs = ws + kN * wrow;
  float* ys = reinterpret_cast<float*>(xs + ((g.in_rows * g.in_cols * kRow + 7) & ~7));
  const int tid = threadIdx.x, threads = blockDim.x;
  const int lane = tid & 31, warp = tid >> 5;
  const bool vec = g.c % 8 == 0;
  constexpr int kChunks = CP / 8;

  // The weight, once per block.
  for (int i = tid; i < kN * taps * kChunks; i += threads) {
    const int ch = i % kChunks, rest = i / kChunks;
    const int tap = rest % taps, n = rest / taps;
    uint16_t* dst = ws + n * wrow + tap * CP + ch * 8;
    const int valid = n < g.m ? min(8, g.c - ch * 8) : 0;
    if (valid > 0)
      StageChunk<T>(wt + (static_cast<long long>(n) * taps + tap) * g.c + ch * 8, valid, vec, false, dst);
    else
      *reinterpret_cast<Chunk8*>(dst) = Chunk8{};
  }
  // Bias of this lane's accumulator columns (2 per output-channel tile).
  float bv[NT][2];
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int col = t * 8 + 2 * (lane & 3) + e;
      bv[t][e] = bias && col < g.m ? Load(bias[col]) : 0.f;
    }
  // This lane's A row offsets (tap (0, 0), channel block 0) in both MMA blocks.
  int a_off[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int p = warp * 32 + j * 16 + (lane & 15);
    const int py = p / g.tw, px = p - py * g.tw;
    a_off[j] = (py * g.sh * g.in_cols + px * g.sw) * kRow + (lane >> 4) * 8;
  }
  // This lane's B row offset: output channel (lane & 7) + 8 (lane >> 4), channels 8 ((lane >> 3) & 1).
  const int b_off = ((lane & 7) + 8 * (lane >> 4)) * wrow + ((lane >> 3) & 1) * 8;
  const int tile_pixels = g.th * g.tw;
  const int window = g.in_rows * g.in_cols;

  for (long long tile = blockIdx.x; tile < g.tiles; tile += gridDim.x) {
    const int tx = static_cast<int>(tile % g.tiles_x);
    const long long rest = tile / g.tiles_x;
    const int ty = static_cast<int>(rest % g.tiles_y);
    const long long img = rest / g.tiles_y;
    const int oy0 = ty * g.th, ox0 = tx * g.tw;
    const int iy0 = oy0 * g.sh - g.ph, ix0 = ox0 * g.sw - g.pw;
    // The input window (zeros outside the image and past c).
    for (int i = tid; i < window * kChunks; i += threads) {
      const int ch = i % kChunks, pix = i / kChunks;
      const int r = pix / g.in_cols, s = pix - r * g.in_cols;
      const int iy = iy0 + r, ix = ix0 + s;
      uint16_t* dst = xs + pix * kRow + ch * 8;
      const int valid = min(8, g.c - ch * 8);
      if (valid > 0 && iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
        StageChunk<T>(x + ((img * g.h + iy) * g.w + ix) * g.c + ch * 8, valid, vec, input_relu, dst);
      else
        *reinterpret_cast<Chunk8*>(dst) = Chunk8{};
    }
    __syncthreads();

    float acc[2][NT][4];
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][t][e] = 0.f;
    if (warp * 32 < tile_pixels) {
      for (int r = 0; r < g.kh; ++r)
        for (int s = 0; s < g.kw; ++s) {
          const int x_tap = (r * g.in_cols + s) * kRow;
          const int w_tap = (r * g.kw + s) * CP;
#pragma unroll
          for (int k0 = 0; k0 < CP; k0 += 16) {
            uint32_t a[2][4];
            LdMatrixX4(a[0], xs + a_off[0] + x_tap + k0);
            LdMatrixX4(a[1], xs + a_off[1] + x_tap + k0);
#pragma unroll
            for (int t = 0; t < NT; t += 2) {
              uint32_t b[4];
              LdMatrixX4(b, ws + b_off + t * 8 * wrow + w_tap + k0);
#pragma unroll
              for (int j = 0; j < 2; ++j) {
                Mma16816<T>(acc[j][t], a[j][0], a[j][1], a[j][2], a[j][3], b[0], b[1]);
                Mma16816<T>(acc[j][t + 1], a[j][0], a[j][1], a[j][2], a[j][3], b[2], b[3]);
              }
            }
          }
        }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int row = warp * 32 + j * 16 + (lane >> 2);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          const int col = t * 8 + 2 * (lane & 3);
          *reinterpret_cast<float2*>(ys + row * kOut + col) =
              make_float2(acc[j][t][0] + bv[t][0], acc[j][t][1] + bv[t][1]);
          *reinterpret_cast<float2*>(ys + (row + 8) * kOut + col) =
              make_float2(acc[j][t][2] + bv[t][0], acc[j][t][3] + bv[t][1]);
        }
      }
    }
    __syncthreads();
    // Epilogue: eight channels a thread, residual added, activation, one 16-byte store.
    const int m_chunks = g.m / 8;
    for (int i = tid; i < tile_pixels * m_chunks; i += threads) {
      const int ch = i % m_chunks, p = i / m_chunks;
      const int py = p / g.tw, px = p - py * g.tw;
      const int oy = oy0 + py, ox = ox0 + px;
      if (oy >= g.oh || ox >= g.ow) continue;
      const long long at = ((img * g.oh + oy) * g.ow + ox) * g.m + ch * 8;
      const float4 lo = *reinterpret_cast<const float4*>(ys + p * kOut + ch * 8);
      const float4 hi = *reinterpret_cast<const float4*>(ys + p * kOut + ch * 8 + 4);
      float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      if (sum) {
        const Chunk8 r = *reinterpret_cast<const Chunk8*>(sum + at);
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] += Load(FromBits<T>(r.v[e]));
      }
      Chunk8 o;
#pragma unroll
      for (int e = 0; e < 8; ++e) o.v[e] = Bits<T>(act(v[e]));
      *reinterpret_cast<Chunk8*>(y + at) = o;
    }
    // The next tile overwrites the window and the float tile only after every
    // thread is done reading them.
    __syncthreads();
  }
}

template <typename T>
using KernelFn = void (*)(Geometry, const T*, const T*, const T*, const T*, T*, DeviceActivation, bool);

template <typename T>
KernelFn<T> Pick(int cp, int nt) {
  if (cp == 16) return nt == 2 ? &DirectConvKernel<T, 16, 2> : &DirectConvKernel<T, 16, 4>;
  return nt == 2 ? &DirectConvKernel<T, 32, 2> : &DirectConvKernel<T, 32, 4>;
}

// KAIWU_CONV_DIRECT: "0" never; "fused" only convs with a fused residual or
// input ReLU; "all" (or unset) every conv the kernel takes.
bool Disabled(bool fused) {
  const char* env = std::getenv("KAIWU_CONV_DIRECT");
  if (!env) return false;
  if (std::strcmp(env, "0") == 0) return true;
  return std::strcmp(env, "fused") == 0 && !fused;
}

size_t SmemBytes(const DirectConvShape& s, int cp, int nt, int th, int tw, int* in_rows, int* in_cols) {
  *in_rows = static_cast<int>((th - 1) * s.stride_h + s.kh);
  *in_cols = static_cast<int>((tw - 1) * s.stride_w + s.kw);
  const size_t w = static_cast<size_t>(nt) * 8 * (s.kh * s.kw * cp + 8) * 2;
  const size_t x = ((static_cast<size_t>(*in_rows) * *in_cols * (cp + 8) + 7) & ~size_t{7}) * 2;
  const size_t y = static_cast<size_t>(th) * tw * (nt * 8 + 4) * 4;
  return w + x + y;
}

}  // namespace

DirectConvPlan PlanDirectConv(const DirectConvShape& s, bool bfloat16, bool fused) {
  DirectConvPlan plan;
  if (Disabled(fused)) return plan;
  // Up to 32 channels each way: wider convs (Atari's 64) keep large weights
  // and few output pixels per block, where cuDNN measured faster.
  if (s.dil_h != 1 || s.dil_w != 1 || s.c < 1 || s.c > 32 || s.m < 8 || s.m > 32 || s.m % 8 != 0) return plan;
  if (s.kh < 1 || s.kw < 1 || s.kh > 11 || s.kw > 11 || s.stride_h < 1 || s.stride_w < 1 || s.stride_h > 4 ||
      s.stride_w > 4 || s.oh < 1 || s.ow < 1 || s.n < 1)
    return plan;
  if (s.n * s.h * s.w * s.c > INT_MAX / 2 || s.n * s.oh * s.ow * s.m > INT_MAX / 2) return plan;
  int device = 0, major = 0, sms = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess || major < 8 ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms < 1 ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
    return plan;
  // One bound for every plan: the attribute below belongs to the kernel, not to
  // the plan, so each plan sets the same value (never lowering another's).
  const size_t limit = std::min(kMaxSmem, static_cast<size_t>(optin));
  const int cp = s.c <= 16 ? 16 : 32;
  const int nt = s.m <= 16 ? 2 : 4;
  // Tiles of 128 pixels (64 for narrow outputs), the first whose shared memory fits.
  const int shapes[][2] = {{8, 16}, {16, 8}, {8, 8}, {4, 16}, {2, 32}};
  for (const auto& sh : shapes) {
    int th = sh[0], tw = sh[1];
    if (tw > 8 && s.ow <= 8) continue;           // half the tile would fall outside
    if (th * tw == 128 && s.oh * s.ow <= 64) continue;
    int rows = 0, cols = 0;
    const size_t bytes = SmemBytes(s, cp, nt, th, tw, &rows, &cols);
    if (bytes > limit) continue;
    plan.cp = cp;
    plan.nt = nt;
    plan.th = th;
    plan.tw = tw;
    plan.in_rows = rows;
    plan.in_cols = cols;
    plan.smem = bytes;
    plan.tiles_y = static_cast<int>((s.oh + th - 1) / th);
    plan.tiles_x = static_cast<int>((s.ow + tw - 1) / tw);
    plan.tiles = s.n * plan.tiles_y * plan.tiles_x;
    break;
  }
  // Enough tiles to occupy half the SMs: below that (batch 1 of a 32 x 32
  // image is 8 tiles) each block's serial taps are the run's latency, and
  // cuDNN measured faster. KAIWU_CONV_DIRECT_MIN_TILES overrides the bound.
  int64_t min_tiles = std::max(1, sms / 2);
  if (const char* env = std::getenv("KAIWU_CONV_DIRECT_MIN_TILES")) min_tiles = std::max(1L, std::atol(env));
  if (!plan.valid() || plan.tiles < min_tiles) return DirectConvPlan{};
  const auto setup = [&](auto fn) {
    if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(limit)) !=
        cudaSuccess)
      return 0;
    int blocks = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fn, plan.th * plan.tw, plan.smem) != cudaSuccess)
      return 0;
    return blocks;
  };
  const int per_sm = bfloat16 ? setup(Pick<__nv_bfloat16>(cp, nt)) : setup(Pick<__half>(cp, nt));
  if (per_sm < 1) {
    cudaGetLastError();  // clear a refused attribute
    return DirectConvPlan{};
  }
  // Enough blocks to fill every SM; each loops over tiles with its weight staged once.
  plan.grid = static_cast<int>(std::min<int64_t>(plan.tiles, static_cast<int64_t>(sms) * per_sm));
  return plan;
}

void LaunchDirectConv(const DirectConvShape& s, const DirectConvPlan& plan, const DirectConvIO& io,
                      bool bfloat16, cudaStream_t stream) {
  Geometry g{};
  g.h = static_cast<int>(s.h);
  g.w = static_cast<int>(s.w);
  g.c = static_cast<int>(s.c);
  g.m = static_cast<int>(s.m);
  g.oh = static_cast<int>(s.oh);
  g.ow = static_cast<int>(s.ow);
  g.kh = static_cast<int>(s.kh);
  g.kw = static_cast<int>(s.kw);
  g.sh = static_cast<int>(s.stride_h);
  g.sw = static_cast<int>(s.stride_w);
  g.ph = static_cast<int>(s.pad_h);
  g.pw = static_cast<int>(s.pad_w);
  g.th = plan.th;
  g.tw = plan.tw;
  g.tiles_y = plan.tiles_y;
  g.tiles_x = plan.tiles_x;
  g.in_rows = plan.in_rows;
  g.in_cols = plan.in_cols;
  g.tiles = plan.tiles;
  const auto launch = [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    Pick<T>(plan.cp, plan.nt)<<<plan.grid, plan.th * plan.tw, plan.smem, stream>>>(
        g, static_cast<const T*>(io.x), static_cast<const T*>(io.w), static_cast<const T*>(io.bias),
        static_cast<const T*>(io.sum), static_cast<T*>(io.y), io.act, io.input_relu);
  };
  if (bfloat16)
    launch(static_cast<__nv_bfloat16*>(nullptr));
  else
    launch(static_cast<__half*>(nullptr));
  CheckLaunch("NhwcConv direct kernel");
}

}  // namespace cuda
}  // namespace kaiwu
