// kaiwu QLinearFused on int8 tensor cores: an implicit GEMM over the packed
// operand of QPackWeights (layout: ops/quant.h QPackedLayout, packed on the
// host at load and refit and uploaded like any other weight), one kernel per
// node. Rows are the rows of X (Gemm/MatMul) or the output pixels of all
// images (Conv: the im2col gather happens while loading the tile, padding
// reads the x zero point); columns are the output channels. Products of
// uint8 (or int8) x int8 accumulate in int32 with mma.sync m16n8k32, then the
// epilogue of the CPU kernel (cpu/quant_fused.cc), per element:
//   f = (acc + corr[c] - w_zp[c] * sum(x)) * mult[c] + bias[c] (+ residual),
//   activation, then y = saturate(round_half_even(f / y_scale) + y_zp) or f.
// acc is of x in the uint8 domain (an int8 x counts as x + 128: the raw int8
// products plus 128 * sum(w[c])); sum(x) (the row's, uint8 domain) is needed
// only with weight zero points, which the header says.
//
// Conv loads: a table of the taps (offset in the image, kernel row and
// column) in shared memory for reduction lengths up to kConvTableK; a row
// whose window lies inside the image reads without bounds checks, and 4 taps
// along one kernel row (unit dilation) as one funnel-shifted pair of aligned
// words. Split-K: when the row x channel tiles would not fill the GPU (the
// dense layers of small batches), blocks take slices of k and write int32
// partial sums to scratch; one epilogue kernel adds them up.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/quant_util.cuh"
#include "ops/quant.h"

namespace kaiwu {
namespace cuda {
namespace {

constexpr int kBM = 64, kBK = 64, kThreads = 128;
constexpr int kRowWords = kBK / 4 + 4;  // shared rows padded: fragment reads are conflict-free

enum class ALoad { kGemmVec, kGemmBytes, kConv, kConvTable, kNhwcVec, kNhwcBytes };
__host__ __device__ constexpr bool IsConv(ALoad l) { return l != ALoad::kGemmVec && l != ALoad::kGemmBytes; }
__host__ __device__ constexpr bool IsNhwc(ALoad l) { return l == ALoad::kNhwcVec || l == ALoad::kNhwcBytes; }
constexpr int kConvTableK = 4096;  // taps of the shared-memory table (8 bytes each)

struct FusedArgs {
  const uint8_t* x;
  const uint8_t* packed;
  const float* residual;  // null without one
  void* y;
  int64_t M;  // rows of X, or images * pixels
  int n, K, kp;
  int rows_from;  // Gemm: channels from here are stored as rows [t][kp] (n: none)
  int64_t corr, mult, bias, wzp, wsum;  // byte offsets in packed (QPackedLayout)
  // Conv (1-D as H = 1): input [images, C, H, W], output [images, n, P = OH * OW]; channels-last
  // (kNhwc*): input [images, H, W, C], output [images, P, n], k in (kernel row, column, channel).
  int C, H, W, OW, P, KH, KW, sh, sw, ph, pw, dh, dw;
  int y_kind;  // 0: float32, 1: uint8, 2: int8
  DeviceActivation act;
  // Split-K: k tiles per split (gridDim.z splits); partial sums [splits][M][n] and, with
  // weight zero points, row sums [M] in scratch (null: one split, the epilogue in the kernel).
  int ktiles_per_split;
  int32_t* partial;
  int32_t* rowsums;
};

template <bool kXS8>
__device__ inline void Mma(int (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if constexpr (kXS8) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// Four 8x8 16-bit matrices from shared memory (ldmatrix), one row address a lane.
__device__ inline void Ldsm4(uint32_t (&r)[4], const uint32_t* p) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Word `kw` (4 consecutive k) of channel c of the packed weights; 0 outside.
template <bool kConv>
__device__ inline uint32_t WeightWord(const FusedArgs& a, const uint32_t* w, int c, int kw) {
  const int kpw = a.kp / 4;
  if (c >= a.n || kw >= kpw) return 0;
  if (kConv) return w[static_cast<int64_t>(c) * kpw + kw];
  const int64_t block = static_cast<int64_t>(c >> 4) * kpw * 16;
  if (c >= a.rows_from) return w[block + (c & 15) * kpw + kw];
  return w[block + kw * 16 + (c & 15)];
}

// Quotient and remainder of v / d: 32-bit division where v fits (64-bit
// division costs tens of instructions).
__device__ inline int64_t DivMod(int64_t v, int d, int* rem) {
  if (v <= INT32_MAX) {
    const unsigned q = static_cast<unsigned>(v) / static_cast<unsigned>(d);
    *rem = static_cast<int>(static_cast<unsigned>(v) - q * static_cast<unsigned>(d));
    return q;
  }
  const int64_t q = v / d;
  *rem = static_cast<int>(v - q * d);
  return q;
}

// The conv window of one output row (pixel): the image's input and the
// top-left tap's position.
struct ConvRow {
  const uint8_t* img = nullptr;
  int ih0 = 0, iw0 = 0;
};

__device__ inline ConvRow MakeConvRow(const FusedArgs& a, int64_t m) {
  ConvRow r;
  if (m >= a.M) return r;
  int p;
  const int64_t img = DivMod(m, a.P, &p);
  const int oh = p / a.OW, ow = p - oh * a.OW;
  r.img = a.x + img * a.C * static_cast<int64_t>(a.H) * a.W;  // the same in either layout
  r.ih0 = oh * a.sh - a.ph;
  r.iw0 = ow * a.sw - a.pw;
  return r;
}

// 32 consecutive bytes k0 .. k0 + 32 of one conv row (im2col order: channel,
// then kernel row, then kernel column); pad: the x zero point as stored.
__device__ inline void GatherConv(const FusedArgs& a, const ConvRow& r, int k0, uint32_t pad,
                                  uint32_t (&out)[8]) {
  const int KK = a.KH * a.KW;
  int c = k0 / KK, t = k0 - c * KK;
  int kh = t / a.KW, kw = t - kh * a.KW;
  const int64_t hw = static_cast<int64_t>(a.H) * a.W;
#pragma unroll
  for (int wd = 0; wd < 8; ++wd) {
    uint32_t v = 0;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int k = k0 + wd * 4 + b;
      uint32_t byte = 0;
      if (r.img && k < a.K) {
        const int ih = r.ih0 + kh * a.dh, iw = r.iw0 + kw * a.dw;
        byte = (ih >= 0 && ih < a.H && iw >= 0 && iw < a.W) ? r.img[c * hw + ih * a.W + iw] : pad;
      }
      v |= byte << (8 * b);
      if (++kw == a.KW) {
        kw = 0;
        if (++kh == a.KH) {
          kh = 0;
          ++c;
        }
      }
    }
    out[wd] = v;
  }
}

// 32 consecutive bytes k0 .. k0 + 32 of one channels-last conv row (k order:
// kernel row, kernel column, channel), one byte at a time; pad: the x zero point.
__device__ inline void GatherNhwc(const FusedArgs& a, const ConvRow& r, int k0, uint32_t pad,
                                  uint32_t (&out)[8]) {
  const int seg = a.KW * a.C;
  int kh = k0 / seg, rem = k0 - kh * seg;
  int kw = rem / a.C, c = rem - kw * a.C;
#pragma unroll
  for (int wd = 0; wd < 8; ++wd) {
    uint32_t v = 0;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int k = k0 + wd * 4 + b;
      uint32_t byte = 0;
      if (r.img && k < a.K) {
        const int ih = r.ih0 + kh * a.dh, iw = r.iw0 + kw * a.dw;
        byte = (ih >= 0 && ih < a.H && iw >= 0 && iw < a.W)
                   ? r.img[(static_cast<int64_t>(ih) * a.W + iw) * a.C + c]
                   : pad;
      }
      v |= byte << (8 * b);
      if (++c == a.C) {
        c = 0;
        if (++kw == a.KW) {
          kw = 0;
          ++kh;
        }
      }
    }
    out[wd] = v;
  }
}

// The same with 16-byte loads: each 16 bytes of k lie in one kernel row's run
// of KW * C contiguous bytes (KW * C % 16 == 0) at 16-byte aligned addresses
// (W * C, stride * C and pad * C multiples of 16), and hold one pixel's
// channels (C % 16 == 0) or 16 / C whole pixels (16 % C == 0, unit column
// dilation). Such a group of pixels starts at a multiple of 16 / C in the
// row and W is one too, so a piece lies wholly inside the image or wholly
// in its padding.
__device__ inline void GatherNhwcVec(const FusedArgs& a, const ConvRow& r, int k0, uint32_t pad,
                                     uint32_t (&out)[8]) {
  const int seg = a.KW * a.C;
  const uint32_t p4 = pad * 0x01010101u;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int k = k0 + 16 * h;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r.img && k < a.K) {
      const int kh = k / seg, rem = k - kh * seg;
      const int px = rem / a.C;
      const int ih = r.ih0 + kh * a.dh, iw = r.iw0 + px * a.dw;
      if (ih >= 0 && ih < a.H && iw >= 0 && iw < a.W)
        v = *reinterpret_cast<const uint4*>(r.img + (static_cast<int64_t>(ih) * a.W + iw) * a.C +
                                            (rem - px * a.C));
      else
        v = make_uint4(p4, p4, p4, p4);
    }
    out[h * 4 + 0] = v.x;
    out[h * 4 + 1] = v.y;
    out[h * 4 + 2] = v.z;
    out[h * 4 + 3] = v.w;
  }
}

// The tap table of a conv: per k, the offset of the tap in the image from the
// window's top-left input position, and the tap's row / column displacement.
struct Tap {
  int off;
  short dy, dx;
};

__device__ inline void FillTaps(const FusedArgs& a, Tap* taps, int kpad) {
  const int KK = a.KH * a.KW;
  for (int k = threadIdx.x; k < kpad; k += blockDim.x) {
    Tap t{0, 16384, 16384};  // past K: outside every image (the weights there are 0)
    if (k < a.K) {
      const int c = k / KK, r = k - c * KK, kh = r / a.KW, kw = r - kh * a.KW;
      t.dy = static_cast<short>(kh * a.dh);
      t.dx = static_cast<short>(kw * a.dw);
      t.off = c * a.H * a.W + t.dy * a.W + t.dx;
    }
    taps[k] = t;
  }
}

// 32 consecutive k from k0 of one conv row through the tap table. `inside`:
// the whole window lies in the image (no bounds checks); `base`: the image
// at the window's top-left position (null: a row past M).
__device__ inline void GatherTaps(const FusedArgs& a, const Tap* taps, const uint8_t* base, int ih0,
                                  int iw0, bool inside, int k0, uint32_t pad, uint32_t (&out)[8]) {
#pragma unroll
  for (int wd = 0; wd < 8; ++wd) {
    const int k = k0 + wd * 4;
    if (!base) {
      out[wd] = 0;
      continue;
    }
    const Tap t0 = taps[k], t3 = taps[k + 3];
    if (inside && k + 3 < a.K && t3.off - t0.off == 3 && t3.dx - t0.dx == 3) {
      // 4 taps along one kernel row: the aligned words holding them.
      const uintptr_t addr = reinterpret_cast<uintptr_t>(base + t0.off);
      const uint32_t* wp = reinterpret_cast<const uint32_t*>(addr & ~uintptr_t{3});
      const unsigned sh = static_cast<unsigned>(addr & 3) * 8;
      const uint32_t lo = wp[0];
      out[wd] = sh ? __funnelshift_r(lo, wp[1], sh) : lo;
      continue;
    }
    uint32_t v = 0;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const Tap t = taps[k + b];
      uint32_t byte;
      if (inside) {
        byte = base[t.off];
      } else {
        const int ih = ih0 + t.dy, iw = iw0 + t.dx;
        byte = (static_cast<unsigned>(ih) < static_cast<unsigned>(a.H) &&
                static_cast<unsigned>(iw) < static_cast<unsigned>(a.W))
                   ? base[t.off]
                   : pad;
      }
      v |= byte << (8 * b);
    }
    out[wd] = v;
  }
}

// Where output row m starts and how far apart its channels are (kNchw: a
// conv's [images, n, P] output; else rows of n, as Gemm and channels-last).
template <bool kNchw>
__device__ inline int64_t RowBase(const FusedArgs& a, int64_t m, int64_t* cstride) {
  if (!kNchw) {
    *cstride = 1;
    return m * a.n;
  }
  int px;
  const int64_t img = DivMod(m, a.P, &px);
  *cstride = a.P;
  return img * a.n * a.P + px;
}

// One channel's epilogue constants.
struct Channel {
  int cc, wz;  // corr (+ 128 * sum(w) for int8 x), w_zero_point
  float mult, bias;
};

template <bool kXS8>
__device__ inline Channel LoadChannel(const FusedArgs& a, int c) {
  Channel ch;
  ch.cc = reinterpret_cast<const int32_t*>(a.packed + a.corr)[c] +
          (kXS8 ? 128 * reinterpret_cast<const int32_t*>(a.packed + a.wsum)[c] : 0);
  ch.wz = reinterpret_cast<const int32_t*>(a.packed + a.wzp)[c];
  ch.mult = reinterpret_cast<const float*>(a.packed + a.mult)[c];
  ch.bias = reinterpret_cast<const float*>(a.packed + a.bias)[c];
  return ch;
}

// The epilogue of one output element (at idx) from its int32 sum and the
// row's uint8-domain sum xs; inv / yz: 1 / y_scale and y_zero_point.
// The general form, out of line: a float output or an activation other than Relu.
__device__ __noinline__ void EmitGeneral(void* y, const float* residual, int y_kind, DeviceActivation act,
                                         int64_t idx, float f, float inv, float yz) {
  if (residual) f += residual[idx];
  if (act.active()) f = act(f);
  if (y_kind == 0) {
    static_cast<float*>(y)[idx] = f;
  } else {
    const float lo = y_kind == 2 ? -128.f : 0.f, hi = y_kind == 2 ? 127.f : 255.f;
    const int q = static_cast<int>(QuantizeValue(f * inv, yz, lo, hi));
    static_cast<uint8_t*>(y)[idx] = static_cast<uint8_t>(q & 0xff);
  }
}

// A quantized output with no activation or Relu, the common case, is inlined;
// the rest calls EmitGeneral. Unrolled over a thread's 16-32 accumulators,
// every activation's code inline (Tanh, Sigmoid, ...) made the channels-last
// conv kernel 8.4k PTX lines (now 6.2k); bench/cuda_int8_conv_bench.cu timed
// the convs 15-25% faster without it (bench/notes/cuda.md).
__device__ inline void Emit(const FusedArgs& a, int64_t idx, const Channel& ch, int acc, int xs, float inv,
                            float yz) {
  float f = static_cast<float>(acc + ch.cc - ch.wz * xs) * ch.mult + ch.bias;
  using K = FusedActivation::Kind;
  const bool relu = a.act.kind == static_cast<int>(K::kRelu);
  if (a.y_kind == 0 || (a.act.kind != static_cast<int>(K::kNone) && !relu)) {
    EmitGeneral(a.y, a.residual, a.y_kind, a.act, idx, f, inv, yz);
    return;
  }
  if (a.residual) f += a.residual[idx];
  if (relu) f = f > 0.f ? f : 0.f;
  const float lo = a.y_kind == 2 ? -128.f : 0.f, hi = a.y_kind == 2 ? 127.f : 255.f;
  const int q = static_cast<int>(QuantizeValue(f * inv, yz, lo, hi));
  static_cast<uint8_t*>(a.y)[idx] = static_cast<uint8_t>(q & 0xff);
}

// Split-K: adds the partial sums of every split, then the epilogue; one thread an element.
template <bool kXS8, bool kNchw>
__global__ void QFusedSplitEpilogue(FusedArgs a, int splits) {
  const int32_t* hdr = reinterpret_cast<const int32_t*>(a.packed);
  const int any_wzp = hdr[0];
  const float inv = __int_as_float(hdr[2]), yz = static_cast<float>(hdr[3]);
  const int64_t total = a.M * a.n;
  KAIWU_CUDA_LOOP(i, total) {
    int acc = 0;
    for (int s = 0; s < splits; ++s) acc += a.partial[s * total + i];
    int c;
    const int64_t m = DivMod(i, a.n, &c);
    int64_t cstride;
    const int64_t base = RowBase<kNchw>(a, m, &cstride);
    Emit(a, base + c * cstride, LoadChannel<kXS8>(a, c), acc, any_wzp ? a.rowsums[m] : 0, inv, yz);
  }
}

template <bool kXS8, ALoad kLoad, int kBN>
__global__ void __launch_bounds__(kThreads) QFusedGemmKernel(FusedArgs a) {
  constexpr bool kConv = IsConv(kLoad);
  constexpr bool kNchw = kConv && !IsNhwc(kLoad);
  constexpr int kMT = 2, kNT = kBN / 16;  // m16 / n8 tiles per warp (warps: 2 x 2)
  constexpr int kBWords = kBN * (kBK / 4) / kThreads;
  constexpr int kBVecs = kBN * (kBK / 16) / kThreads;  // 16-byte pieces of B a thread
  __shared__ __align__(16) uint32_t as[kBM * kRowWords];
  __shared__ __align__(16) uint32_t bs[kBN * kRowWords];
  __shared__ int rowsum[kBM];
  extern __shared__ Tap taps[];  // kConvTable: ceil(K / kBK) * kBK entries

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, tig = lane & 3;
  const int wm = warp & 1, wn = warp >> 1;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kBM;
  const int c0 = blockIdx.y * kBN;
  const int32_t* hdr = reinterpret_cast<const int32_t*>(a.packed);
  const int any_wzp = hdr[0], xz = hdr[1];
  const uint32_t pad = static_cast<uint32_t>(kXS8 ? xz - 128 : xz) & 0xff;
  const uint32_t* w = reinterpret_cast<const uint32_t*>(a.packed + QPackedLayout::kHeader);
  const int ktiles = (a.K + kBK - 1) / kBK;
  const int kt_begin = blockIdx.z * a.ktiles_per_split;
  const int kt_end = min(ktiles, kt_begin + a.ktiles_per_split);

  // The loader's share of a tile: A row tid / 2, bytes (tid % 2) * 32 .. + 32.
  const int a_row = tid >> 1, a_half = tid & 1;
  const int64_t a_m = m0 + a_row;
  ConvRow crow;
  if (kConv) crow = MakeConvRow(a, a_m);
  const uint8_t* tbase = nullptr;
  bool inside = false;
  if (kLoad == ALoad::kConvTable) {
    FillTaps(a, taps, ktiles * kBK);
    if (crow.img) {
      tbase = crow.img + static_cast<int64_t>(crow.ih0) * a.W + crow.iw0;
      inside = crow.ih0 >= 0 && crow.iw0 >= 0 && crow.ih0 + (a.KH - 1) * a.dh < a.H &&
               crow.iw0 + (a.KW - 1) * a.dw < a.W;
    }
    __syncthreads();
  }
  uint32_t areg[8], breg[kBWords];
  uint4 bvec[kBVecs];
  // Conv weights are rows [np][kp]: with kp % 16 == 0, 16-byte pieces of a channel's row.
  const bool b_vec = kConv && a.kp % 16 == 0;
  const int kpw = a.kp / 4;

  auto load = [&](int kt) {
    const int k0 = kt * kBK;
    if (kLoad == ALoad::kGemmVec) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int q = tid + i * kThreads, row = q >> 2, seg = q & 3;
        const int64_t m = m0 + row;
        const int k = k0 + seg * 16;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (m < a.M && k < a.K) v = *reinterpret_cast<const uint4*>(a.x + m * a.K + k);
        areg[i * 4 + 0] = v.x;
        areg[i * 4 + 1] = v.y;
        areg[i * 4 + 2] = v.z;
        areg[i * 4 + 3] = v.w;
      }
    } else if (kLoad == ALoad::kGemmBytes) {
      const uint8_t* xr = a.x + a_m * a.K;
#pragma unroll
      for (int wd = 0; wd < 8; ++wd) {
        uint32_t v = 0;
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const int k = k0 + a_half * 32 + wd * 4 + b;
          if (a_m < a.M && k < a.K) v |= static_cast<uint32_t>(xr[k]) << (8 * b);
        }
        areg[wd] = v;
      }
    } else if (kLoad == ALoad::kConvTable) {
      GatherTaps(a, taps, tbase, crow.ih0, crow.iw0, inside, k0 + a_half * 32, pad, areg);
    } else if (kLoad == ALoad::kNhwcVec) {
      GatherNhwcVec(a, crow, k0 + a_half * 32, pad, areg);
    } else if (kLoad == ALoad::kNhwcBytes) {
      GatherNhwc(a, crow, k0 + a_half * 32, pad, areg);
    } else {
      GatherConv(a, crow, k0 + a_half * 32, pad, areg);
    }
    if (b_vec) {
#pragma unroll
      for (int i = 0; i < kBVecs; ++i) {
        const int q = tid + i * kThreads, col = q >> 2, kw = k0 / 4 + (q & 3) * 4;
        const int c = c0 + col;
        bvec[i] = c < a.n && kw < kpw ? *reinterpret_cast<const uint4*>(w + static_cast<int64_t>(c) * kpw + kw)
                                      : make_uint4(0, 0, 0, 0);
      }
      return;
    }
#pragma unroll
    for (int i = 0; i < kBWords; ++i) {
      const int q = tid + i * kThreads, kw = q / kBN, col = q - kw * kBN;
      breg[i] = WeightWord<kConv>(a, w, c0 + col, k0 / 4 + kw);
    }
  };
  auto store = [&]() {
    if (kLoad == ALoad::kGemmVec) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int q = tid + i * kThreads, row = q >> 2, seg = q & 3;
        *reinterpret_cast<uint4*>(&as[row * kRowWords + seg * 4]) =
            make_uint4(areg[i * 4], areg[i * 4 + 1], areg[i * 4 + 2], areg[i * 4 + 3]);
      }
    } else {
      uint4* dst = reinterpret_cast<uint4*>(&as[a_row * kRowWords + a_half * 8]);
      dst[0] = make_uint4(areg[0], areg[1], areg[2], areg[3]);
      dst[1] = make_uint4(areg[4], areg[5], areg[6], areg[7]);
    }
    if (b_vec) {
#pragma unroll
      for (int i = 0; i < kBVecs; ++i) {
        const int q = tid + i * kThreads, col = q >> 2;
        *reinterpret_cast<uint4*>(&bs[col * kRowWords + (q & 3) * 4]) = bvec[i];
      }
      return;
    }
#pragma unroll
    for (int i = 0; i < kBWords; ++i) {
      const int q = tid + i * kThreads, kw = q / kBN, col = q - kw * kBN;
      bs[col * kRowWords + kw] = breg[i];
    }
  };

  int acc[kMT][kNT][4];
#pragma unroll
  for (int i = 0; i < kMT; ++i)
#pragma unroll
    for (int j = 0; j < kNT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0;

  if (kt_begin < kt_end) {
    load(kt_begin);
    store();
  }
  __syncthreads();
  for (int kt = kt_begin; kt < kt_end; ++kt) {
    if (kt + 1 < kt_end) load(kt + 1);
#pragma unroll
    for (int kk = 0; kk < kBK / 32; ++kk) {
      // Fragments by ldmatrix (rows of 80 bytes: conflict-free). A: lanes 0-15 address
      // rows 0-15 of the m16 tile at k bytes 0-15, lanes 16-31 the same rows at 16-31,
      // giving a0 (rows g, k 0-15), a1 (rows g + 8), a2 and a3 (k 16-31). B: two n8
      // tiles per x4, lanes 0-7 / 8-15 / 16-23 / 24-31 the first tile's k 0-15 / 16-31,
      // then the second's.
      uint32_t af[kMT][4], bf[kNT][2];
#pragma unroll
      for (int i = 0; i < kMT; ++i)
        Ldsm4(af[i], &as[(wm * 32 + i * 16 + (lane & 15)) * kRowWords + kk * 8 + (lane >> 4) * 4]);
#pragma unroll
      for (int j = 0; j < kNT; j += 2) {
        uint32_t r[4];
        Ldsm4(r, &bs[(wn * (kBN / 2) + (j + (lane >> 4)) * 8 + (lane & 7)) * kRowWords + kk * 8 +
                     ((lane >> 3) & 1) * 4]);
        bf[j][0] = r[0];
        bf[j][1] = r[1];
        bf[j + 1][0] = r[2];
        bf[j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < kMT; ++i)
#pragma unroll
        for (int j = 0; j < kNT; ++j) Mma<kXS8>(acc[i][j], af[i], bf[j]);
    }
    __syncthreads();
    if (kt + 1 < kt_end) {
      store();
      __syncthreads();
    }
  }

  // Row sums of x (uint8 domain) for weight zero points: one row a thread
  // (split-K: the first split's first column of blocks, into scratch).
  const bool split = a.partial != nullptr;
  if (any_wzp && (!split || (blockIdx.y == 0 && blockIdx.z == 0))) {
    if (tid < kBM && m0 + tid < a.M) {
      const int64_t m = m0 + tid;
      int s = 0;
      if (kConv) {
        const ConvRow r = MakeConvRow(a, m);
        for (int k0 = 0; k0 < a.K; k0 += 32) {
          uint32_t words[8];
          if (IsNhwc(kLoad)) GatherNhwc(a, r, k0, pad, words);
          else GatherConv(a, r, k0, pad, words);
          for (int i = 0; i < 32 && k0 + i < a.K; ++i) {
            const int v = (words[i >> 2] >> (8 * (i & 3))) & 0xff;
            s += kXS8 ? ((v ^ 0x80) & 0xff) : v;
          }
        }
      } else {
        const uint8_t* xr = a.x + m * a.K;
        for (int k = 0; k < a.K; ++k) s += kXS8 ? ((xr[k] ^ 0x80) & 0xff) : xr[k];
      }
      if (split) a.rowsums[m] = s;
      else rowsum[tid] = s;
    }
    __syncthreads();
  }

  // The thread's channels' constants once, then its rows.
  Channel chs[kNT][2];
#pragma unroll
  for (int j = 0; j < kNT; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int c = c0 + wn * (kBN / 2) + j * 8 + tig * 2 + e;
      if (!split && c < a.n) chs[j][e] = LoadChannel<kXS8>(a, c);
    }
  const float inv = __int_as_float(hdr[2]), yz = static_cast<float>(hdr[3]);
#pragma unroll
  for (int i = 0; i < kMT; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int lr = wm * 32 + i * 16 + g + 8 * h;
      const int64_t m = m0 + lr;
      if (m >= a.M) continue;
      const int xs = !split && any_wzp ? rowsum[lr] : 0;
      int64_t cstride = 1, base = 0;
      if (!split) base = RowBase<kNchw>(a, m, &cstride);
#pragma unroll
      for (int j = 0; j < kNT; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = c0 + wn * (kBN / 2) + j * 8 + tig * 2 + e;
          if (c >= a.n) continue;
          if (split) a.partial[(blockIdx.z * a.M + m) * a.n + c] = acc[i][j][h * 2 + e];
          else Emit(a, base + c * cstride, chs[j][e], acc[i][j][h * 2 + e], xs, inv, yz);
        }
    }
}

class QFusedKernel : public CudaKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const QFusedParams& p = ctx.Params<QFusedParams>();
    const QPackedLayout L(p.k, p.n);
    x_int8_ = ctx.in(0).dtype == DType::kInt8;
    FusedArgs& a = args_;
    a = FusedArgs{};
    if (p.row_bytes != 0) Unsupported(ctx, "row_bytes (weights packed for the CPU kernel's in-place rows)");
    if (p.k > (1 << 16) || p.n > (1 << 24))
      Unsupported(ctx, "k = " + std::to_string(p.k) + ", n = " + std::to_string(p.n) +
                           " (int32 accumulation needs k <= 65536)");
    a.n = static_cast<int>(p.n);
    a.K = static_cast<int>(p.k);
    a.kp = static_cast<int>(L.kp);
    a.corr = L.corr();
    a.mult = L.mult();
    a.bias = L.bias();
    a.wzp = L.wzp();
    a.wsum = L.wsum();
    a.y_kind = p.y_dtype == DType::kFloat32 ? 0 : p.y_dtype == DType::kUInt8 ? 1 : 2;
    a.act = DeviceActivation::From(p.act);
    conv_ = p.conv;
    nhwc_ = p.channels_last;
    has_residual_ = p.has_residual;
    if (p.conv) {
      const SpatialGeometry& g = p.geo;
      if (g.nd > 2) Unsupported(ctx, "a 3-D integer convolution");
      const int64_t KK = g.kernel_size(), C = p.k / KK;
      a.C = static_cast<int>(C);
      a.H = static_cast<int>(g.in[1]);
      a.W = static_cast<int>(g.in[2]);
      a.OW = static_cast<int>(g.out[2]);
      a.P = static_cast<int>(g.out_size());
      a.KH = static_cast<int>(g.kernel[1]);
      a.KW = static_cast<int>(g.kernel[2]);
      a.sh = static_cast<int>(g.stride[1]);
      a.sw = static_cast<int>(g.stride[2]);
      a.ph = static_cast<int>(g.pad_begin[1]);
      a.pw = static_cast<int>(g.pad_begin[2]);
      a.dh = static_cast<int>(g.dilation[1]);
      a.dw = static_cast<int>(g.dilation[2]);
      if (C * g.in_size() > (int64_t{1} << 31) || g.out_size() > (int64_t{1} << 31))
        Unsupported(ctx, "an image of more than 2^31 elements");
      a.M = ctx.in(0).shape[0] * g.out_size();
      a.rows_from = a.n;
      // The tap table: short displacements, and taps past K pushed outside every image.
      table_ = !nhwc_ && p.k <= kConvTableK && g.in[1] < 8192 && g.in[2] < 8192 &&
               (g.kernel[1] - 1) * g.dilation[1] < 8192 && (g.kernel[2] - 1) * g.dilation[2] < 8192;
      // Channels-last rows in 16-byte pieces (GatherNhwcVec), given 16-byte aligned X.
      const bool pieces = a.C % 16 == 0 || (16 % a.C == 0 && a.dw == 1);
      nhwc_vec_ = nhwc_ && pieces && (a.KW * a.C) % 16 == 0 && (int64_t{a.W} * a.C) % 16 == 0 &&
                  (a.sw * a.C) % 16 == 0 && (a.pw * a.C) % 16 == 0;
    } else {
      a.M = p.rows;
      a.rows_from = static_cast<int>(p.n - L.dot_tail());
    }
    if ((a.M + kBM - 1) / kBM > INT32_MAX) Unsupported(ctx, "more than 2^37 rows");
    wide_ = a.n > 32;
    // Split k while the tiles fill less than the GPU's multiprocessors, for k of 8 tiles or more
    // (shorter ones measured no faster split: mlp), at least 2 k tiles a split.
    int device = 0, sms = 132;
    if (cudaGetDevice(&device) == cudaSuccess) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    const int bn = wide_ ? 64 : 32;
    const int64_t tiles = (a.M + kBM - 1) / kBM * ((a.n + bn - 1) / bn);
    const int ktiles = (a.K + kBK - 1) / kBK;
    splits_ = 1;
    if (SplitKEnabled() && tiles < sms && ktiles >= 8) {
      const int64_t want = std::min<int64_t>({(2 * sms + tiles - 1) / tiles, ktiles / 2, 32});
      splits_ = static_cast<int>(std::max<int64_t>(1, want));
    }
    a.ktiles_per_split = (ktiles + splits_ - 1) / splits_;
    splits_ = (ktiles + a.ktiles_per_split - 1) / a.ktiles_per_split;
    if (splits_ > 1) {
      partial_bytes_ = static_cast<size_t>(splits_) * a.M * a.n * 4;
      ctx.scratch_bytes = partial_bytes_ + static_cast<size_t>(a.M) * 4;
    }
  }

  void Run(const KernelIO& io) const override {
    if (args_.M == 0) return;
    FusedArgs a = args_;
    a.x = static_cast<const uint8_t*>(io.inputs[0]);
    a.packed = static_cast<const uint8_t*>(io.inputs[1]);
    a.residual = has_residual_ ? static_cast<const float*>(io.inputs[2]) : nullptr;
    a.y = io.outputs[0];
    if (splits_ > 1) {
      a.partial = static_cast<int32_t*>(io.scratch);
      a.rowsums = reinterpret_cast<int32_t*>(static_cast<char*>(io.scratch) + partial_bytes_);
    }
    const bool aligned = reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
    const bool vec = conv_ ? nhwc_vec_ && aligned : a.K % 16 == 0 && aligned;
    if (x_int8_) Dispatch<true>(a, vec, Dev(io));
    else Dispatch<false>(a, vec, Dev(io));
    CheckLaunch("QLinearFused kernel");
  }

 private:
  // KAIWU_INT8_SPLIT_K=0 never splits (an A/B switch, read when a plan is made).
  static bool SplitKEnabled() {
    const char* v = std::getenv("KAIWU_INT8_SPLIT_K");
    return !(v && std::string(v) == "0");
  }
  template <bool kXS8>
  void Dispatch(const FusedArgs& a, bool vec, const DeviceContext& dev) const {
    if (conv_ && nhwc_ && vec) Launch<kXS8, ALoad::kNhwcVec>(a, dev);
    else if (conv_ && nhwc_) Launch<kXS8, ALoad::kNhwcBytes>(a, dev);
    else if (conv_ && table_) Launch<kXS8, ALoad::kConvTable>(a, dev);
    else if (conv_) Launch<kXS8, ALoad::kConv>(a, dev);
    else if (vec) Launch<kXS8, ALoad::kGemmVec>(a, dev);
    else Launch<kXS8, ALoad::kGemmBytes>(a, dev);
  }
  template <bool kXS8, ALoad kLoad>
  void Launch(const FusedArgs& a, const DeviceContext& dev) const {
    const unsigned gx = static_cast<unsigned>((a.M + kBM - 1) / kBM);
    const size_t table =
        kLoad == ALoad::kConvTable ? sizeof(Tap) * ((a.K + kBK - 1) / kBK) * kBK : 0;
    if (wide_) {
      QFusedGemmKernel<kXS8, kLoad, 64>
          <<<dim3(gx, (a.n + 63) / 64, splits_), kThreads, table, dev.stream>>>(a);
    } else {
      QFusedGemmKernel<kXS8, kLoad, 32>
          <<<dim3(gx, (a.n + 31) / 32, splits_), kThreads, table, dev.stream>>>(a);
    }
    if (splits_ > 1) {
      constexpr bool kNchw = IsConv(kLoad) && !IsNhwc(kLoad);
      QFusedSplitEpilogue<kXS8, kNchw><<<GridFor(a.M * a.n), kBlock, 0, dev.stream>>>(a, splits_);
    }
  }

  FusedArgs args_{};
  bool x_int8_ = false, conv_ = false, wide_ = false, has_residual_ = false, table_ = false;
  bool nhwc_ = false, nhwc_vec_ = false;
  int splits_ = 1;
  size_t partial_bytes_ = 0;
};

}  // namespace

void RegisterQuantFusedKernel(KernelRegistry& r) {
  r.Register(OpId::kQLinearFused, {DType::kUInt8, DType::kInt8}, &MakeKernel<QFusedKernel>);
}

}  // namespace cuda
}  // namespace kaiwu
