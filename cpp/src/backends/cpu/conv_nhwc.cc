// The CPU kernels of the channels-last ops that passes/layout_nhwc.cc makes
// for CPU sessions: NhwcConv (float32, or X of uint8 widened as it is read;
// group 1, no dilation; the register tiles are in conv_nhwc_tiles.inc) and
// NhwcMaxPool (float32, uint8, int8).
#include "backends/cpu/conv_nhwc.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/conv_family.h"
#include "backends/cpu/sgemm_packed.h"
#include "backends/cpu/sgemm_packed_isa.h"
#include "backends/cpu/simd_f32.h"
#include "ops/conv.h"

namespace kaiwu {
namespace cpu {

namespace {

// Portable variant: each element sums over K in the tiles' order.
void RowsScalar(const NhwcConvProblem& pr, int64_t p0, int64_t p1, int64_t q0, int64_t q1) {
  const int64_t k = pr.kh * pr.seg;
  const int64_t c0 = q0 * kPackedPanel, c1 = std::min(pr.m, q1 * kPackedPanel);
  for (int64_t p = p0; p < p1; ++p) {
    float* yr = pr.y + p * pr.m;
    for (int64_t col = c0; col < c1; ++col) {
      const float* b = pr.packed + (col / kPackedPanel * k) * kPackedPanel + col % kPackedPanel;
      float s = 0.f;
      for (int64_t h = 0; h < pr.kh; ++h) {
        const float* a = pr.x + pr.off[p] + h * pr.row_stride;
        for (int64_t q = 0; q < pr.seg; ++q) s += a[q] * b[(h * pr.seg + q) * kPackedPanel];
      }
      yr[col] = s + (pr.bias ? pr.bias[col] : 0.f);
      if (pr.sum) yr[col] += pr.sum[p * pr.m + col];
    }
    if (pr.act->active()) pr.act->Apply(yr + c0, c1 - c0);
  }
}

}  // namespace

void NhwcConvRows(PackedIsa isa, const NhwcConvProblem& pr, int64_t p0, int64_t p1, int64_t q0,
                  int64_t q1) {
  switch (isa) {
#ifdef KAIWU_PACKED_X86
    case PackedIsa::kAvx512: isa_avx512::NhwcConvRows(pr, p0, p1, q0, q1); return;
    case PackedIsa::kAvx2: isa_avx2::NhwcConvRows(pr, p0, p1, q0, q1); return;
#endif
    default: RowsScalar(pr, p0, p1, q0, q1); return;
  }
}

int64_t& NhwcConvRunTileCount() {
  thread_local int64_t count = 0;
  return count;
}

int64_t NhwcConvPanelGroup(PackedIsa isa) {
  switch (isa) {
#ifdef KAIWU_PACKED_X86
    case PackedIsa::kAvx512: return isa_avx512::PanelGroup();
    case PackedIsa::kAvx2: return isa_avx2::PanelGroup();
#endif
    default: return 1;
  }
}

namespace {

// Run tiles (NhwcConvProblem::run_tiles) unless KAIWU_CONV_RUN_TILES=0, read
// once: the switch exists to compare the two tilings in one build.
bool RunTilesEnabled() {
  static const bool on = [] {
    const char* env = std::getenv("KAIWU_CONV_RUN_TILES");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  return on;
}

class NhwcConvKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const ConvParams& p = ctx.Params<ConvParams>();
    const Shape& x = ctx.in(0).shape;
    const Shape& w = ctx.in(1).shape;
    const SpatialGeometry& g = p.geo;
    if (p.group != 1 || g.dilation[1] != 1 || g.dilation[2] != 1)
      ctx.Error("the CPU NhwcConv takes group 1 and no dilation");
    n_ = x[0];
    h_ = x[1];
    w_ = x[2];
    c_ = x[3];
    m_ = w[0];
    kh_ = w[1];
    kw_ = w[2];
    oh_ = g.out[1];
    ow_ = g.out[2];
    sh_ = g.stride[1];
    sw_ = g.stride[2];
    pt_ = g.pad_begin[1];
    pl_ = g.pad_begin[2];
    act_ = p.act;
    has_bias_ = p.has_bias;
    has_sum_ = ctx.HasInput(4);
    isa_ = ActivePackedIsa();
    // Windows reach rows [-pt, hp - pt) and columns [-pl, wp - pl): copied
    // into a zero-bordered image when that leaves x.
    hp_ = (oh_ - 1) * sh_ + kh_;
    wp_ = (ow_ - 1) * sw_ + kw_;
    // "_kaiwu_input_relu" (fuse_relu_into_nhwc_conv): the conv reads max(x, 0),
    // applied as the image is copied, so such a conv always copies.
    input_relu_ = ctx.node.GetInt("_kaiwu_input_relu", 0) != 0;
    // X of uint8 (fuse_cast_into_nhwc_conv): widened to float32 as each image
    // is copied, so such a conv always copies too.
    input_u8_ = ctx.in(0).dtype == DType::kUInt8;
    padded_ = input_relu_ || input_u8_ || pt_ > 0 || pl_ > 0 || hp_ - pt_ > h_ || wp_ - pl_ > w_;
    if (!padded_) hp_ = h_, wp_ = w_;
    if (hp_ * wp_ * c_ >= std::numeric_limits<int32_t>::max())
      ctx.Error("NhwcConv image of ", hp_ * wp_ * c_, " floats is too large");
    off_.resize(oh_ * ow_);
    for (int64_t oh = 0; oh < oh_; ++oh)
      for (int64_t ow = 0; ow < ow_; ++ow)
        off_[oh * ow_ + ow] = static_cast<int32_t>((oh * sh_ * wp_ + ow * sw_) * c_);
    const int64_t threads = std::max<int64_t>(1, ctx.num_threads);
    slots_ = std::max<int64_t>(1, std::min(threads, n_));
    image_floats_ = padded_ ? (hp_ * wp_ * c_ + 15) / 16 * 16 : 0;
    // Without input 3 (a weight the session could not pack statically) each
    // run packs W into scratch first.
    packed_floats_ = ctx.HasInput(3) ? 0 : (m_ + 15) / 16 * 16 * kh_ * kw_ * c_;
    ctx.scratch_bytes = (slots_ * image_floats_ + packed_floats_) * sizeof(float) + 64;
  }

  void Run(const KernelIO& io) const override {
    const void* x = io.inputs[0];
    const float* bias = has_bias_ ? static_cast<const float*>(io.inputs[2]) : nullptr;
    const float* sum = has_sum_ ? static_cast<const float*>(io.inputs[4]) : nullptr;
    float* y = static_cast<float*>(io.outputs[0]);
    const int64_t pixels = oh_ * ow_;
    if (n_ == 0 || m_ == 0 || pixels == 0) return;
    float* scratch = reinterpret_cast<float*>(
        (reinterpret_cast<uintptr_t>(io.scratch) + 63) & ~uintptr_t{63});
    const float* packed = scratch;
    if (packed_floats_ > 0) {
      PackB(/*trans_b=*/true, kh_ * kw_ * c_, m_, static_cast<const float*>(io.inputs[1]),
            scratch);
      scratch += packed_floats_;
    } else {
      packed = static_cast<const float*>(io.inputs[3]);
    }
    const int64_t threads = io.pool ? io.pool->num_threads() : 1;
    const double flops = 2.0 * static_cast<double>(kh_ * kw_ * c_ * m_) * pixels;
    if (threads == 1 || n_ >= threads) {
      // Each thread its own padded copy (a slot), taking images one at a time
      // while any are left: a thread slowed down (another process on its
      // core, a late start) takes fewer, instead of the others waiting for
      // its fixed share. Each image is computed alone, so the split does not
      // change the result.
      const int64_t slots = std::min<int64_t>(slots_, threads);
      std::atomic<int64_t> next{0};
      auto run = [&](int64_t s0, int64_t s1) {
        for (int64_t s = s0; s < s1; ++s)
          for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n_;
               i = next.fetch_add(1, std::memory_order_relaxed))
            Image(x, packed, bias, sum, y, i, scratch + s * image_floats_, nullptr);
      };
      if (slots == 1) {
        run(0, 1);
      } else {
        io.pool->ParallelFor(
            slots, flops * static_cast<double>(n_) / slots / PackedFlopsPerCostUnit(isa_), run);
      }
      return;
    }
    // Fewer images than threads: each image's rows split across the pool.
    for (int64_t i = 0; i < n_; ++i) Image(x, packed, bias, sum, y, i, scratch, io.pool);
  }

 private:
  void Image(const void* x, const float* packed, const float* bias, const float* sum, float* y,
             int64_t i, float* buf, ThreadPool* pool) const {
    const int64_t image = i * h_ * w_ * c_;
    const float* src = static_cast<const float*>(x) + image;
    if (input_u8_) {
      Pad(static_cast<const uint8_t*>(x) + image, buf);
      src = buf;
    } else if (padded_) {
      Pad(src, buf);
      src = buf;
    }
    const int64_t out = i * oh_ * ow_ * m_;
    const NhwcConvProblem pr{src,    off_.data(), kh_,   kw_ * c_,    wp_ * c_,
                             m_,     packed,      bias,  &act_,       y + out,
                             sum ? sum + out : nullptr, RunTilesEnabled()};
    const int64_t pixels = oh_ * ow_, panels = (m_ + kPackedPanel - 1) / kPackedPanel;
    if (pool == nullptr) {
      NhwcConvRows(isa_, pr, 0, pixels, 0, panels);
      return;
    }
    // Tasks of 48 pixels (whole tiles of 6 and 12) over all columns; where that
    // leaves threads idle (small images, many threads), of fewer pixels and
    // column groups as wide as a full tile, so the tiles stay whole.
    const int64_t threads = pool->num_threads();
    int64_t block = 48, group = panels;
    if ((pixels + block - 1) / block < 2 * threads) {
      group = std::min(panels, NhwcConvPanelGroup(isa_));
      block = 24;
    }
    const int64_t blocks = (pixels + block - 1) / block, groups = (panels + group - 1) / group;
    const double cost = 2.0 * static_cast<double>(kh_ * kw_ * c_) *
                        static_cast<double>(std::min(m_, group * kPackedPanel)) * block /
                        PackedFlopsPerCostUnit(isa_);
    pool->ParallelFor(blocks * groups, cost, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t g = t / blocks, b = t % blocks;
        NhwcConvRows(isa_, pr, b * block, std::min(pixels, (b + 1) * block), g * group,
                     std::min(panels, (g + 1) * group));
      }
    });
  }

  // One image into the zero-bordered [hp, wp, c] buffer (through max(x, 0)
// with input_relu_).
  template <typename T>
  void Pad(const T* src, float* dst) const {
    const int64_t c0 = std::clamp<int64_t>(pl_, 0, wp_);            // first column inside
    const int64_t c1 = std::clamp<int64_t>(pl_ + w_, c0, wp_);      // past the last
    for (int64_t r = 0; r < hp_; ++r, dst += wp_ * c_) {
      const int64_t ih = r - pt_;
      if (ih < 0 || ih >= h_) {
        std::memset(dst, 0, wp_ * c_ * sizeof(float));
        continue;
      }
      std::memset(dst, 0, c0 * c_ * sizeof(float));
      const T* row = src + (ih * w_ + c0 - pl_) * c_;
      if constexpr (!std::is_same_v<T, float>) {
        // Bytes are never negative: the input Relu has nothing to do.
        for (int64_t j = 0; j < (c1 - c0) * c_; ++j) dst[c0 * c_ + j] = static_cast<float>(row[j]);
      } else if (input_relu_) {
        for (int64_t j = 0; j < (c1 - c0) * c_; ++j) dst[c0 * c_ + j] = row[j] > 0.f ? row[j] : 0.f;
      } else {
        std::memcpy(dst + c0 * c_, row, (c1 - c0) * c_ * sizeof(float));
      }
      std::memset(dst + c1 * c_, 0, (wp_ - c1) * c_ * sizeof(float));
    }
  }

  Activation act_;
  PackedIsa isa_ = PackedIsa::kScalar;
  bool has_bias_ = false, has_sum_ = false, padded_ = false, input_relu_ = false, input_u8_ = false;
  int64_t n_ = 0, h_ = 0, w_ = 0, c_ = 0, m_ = 0, kh_ = 0, kw_ = 0, oh_ = 0, ow_ = 0;
  int64_t sh_ = 1, sw_ = 1, pt_ = 0, pl_ = 0, hp_ = 0, wp_ = 0;
  int64_t slots_ = 1, image_floats_ = 0, packed_floats_ = 0;
  std::vector<int32_t> off_;  // per output pixel: where its patch starts in an image
};

constexpr int64_t kMaxTaps = 64;  // NhwcMaxPool windows; larger ones: the NCHW op

// y[0, c) = max over the nt runs x + taps[t] of C floats (-inf when nt is 0),
// a few vectors of channels at a time in registers.
void MaxOfRuns(const float* x, const int64_t* taps, int nt, int64_t C, float* y) {
  int64_t c = 0;
#ifdef KAIWU_SIMD_F32
  using S = SimdF32;
  constexpr int kL = S::kLanes;
  const S::V lowest = S::Set1(-std::numeric_limits<float>::infinity());
  for (; c + 2 * kL <= C; c += 2 * kL) {
    S::V a0 = lowest, a1 = lowest;
    for (int t = 0; t < nt; ++t) {
      const float* r = x + taps[t] + c;
      a0 = S::Max(a0, S::LoadU(r));
      a1 = S::Max(a1, S::LoadU(r + kL));
    }
    S::StoreU(y + c, a0);
    S::StoreU(y + c + kL, a1);
  }
  for (; c + kL <= C; c += kL) {
    S::V a0 = lowest;
    for (int t = 0; t < nt; ++t) a0 = S::Max(a0, S::LoadU(x + taps[t] + c));
    S::StoreU(y + c, a0);
  }
#endif
  for (; c < C; ++c) {
    float m = -std::numeric_limits<float>::infinity();
    for (int t = 0; t < nt; ++t) m = x[taps[t] + c] > m ? x[taps[t] + c] : m;
    y[c] = m;
  }
}

// The same over bytes (uint8 or int8: a DequantizeLinear's input, the pool
// hoisted above it by passes/hoist_pool_above_dequantize.cc); the lowest
// value when nt is 0.
// 16 bytes at a time in a register across the taps, then the tail.
template <typename T>
struct Bytes16;  // the 16-byte vector of T (GCC ignores vector_size on a dependent type)
template <>
struct Bytes16<uint8_t> {
  using V = uint8_t __attribute__((vector_size(16)));
};
template <>
struct Bytes16<int8_t> {
  using V = int8_t __attribute__((vector_size(16)));
};

template <typename T>
void MaxOfRuns(const T* x, const int64_t* taps, int nt, int64_t C, T* y) {
  if (nt == 0) {
    std::fill(y, y + C, std::numeric_limits<T>::lowest());
    return;
  }
  using V = typename Bytes16<T>::V;
  static_assert(sizeof(V) == 16, "a 16-byte vector");
  int64_t c = 0;
  for (; c + 16 <= C; c += 16) {
    V a;
    std::memcpy(&a, x + taps[0] + c, 16);
    for (int t = 1; t < nt; ++t) {
      V r;
      std::memcpy(&r, x + taps[t] + c, 16);
      a = r > a ? r : a;
    }
    std::memcpy(y + c, &a, 16);
  }
  for (; c < C; ++c) {
    T m = x[taps[0] + c];
    for (int t = 1; t < nt; ++t) m = x[taps[t] + c] > m ? x[taps[t] + c] : m;
    y[c] = m;
  }
}

// Channels-last 2-D MaxPool: per output pixel, the max of the window's
// C-element runs (float32, uint8 or int8).
class NhwcMaxPoolKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const PoolParams& p = ctx.Params<PoolParams>();
    const Shape& x = ctx.in(0).shape;
    geo_ = p.geo;
    if (geo_.kernel[1] * geo_.kernel[2] > kMaxTaps)
      ctx.Error("the CPU NhwcMaxPool takes windows of at most ", kMaxTaps, " taps");
    // Windows wholly inside x read their taps at these offsets from the
    // window's first.
    rel_.clear();
    for (int64_t kh = 0; kh < geo_.kernel[1]; ++kh)
      for (int64_t kw = 0; kw < geo_.kernel[2]; ++kw)
        rel_.push_back((kh * geo_.dilation[1] * geo_.in[2] + kw * geo_.dilation[2]) * x[3]);
    n_ = x[0];
    c_ = x[3];
    dtype_ = ctx.in(0).dtype;
  }

  void Run(const KernelIO& io) const override {
    switch (dtype_) {
      case DType::kUInt8: return RunTyped<uint8_t>(io);
      case DType::kInt8: return RunTyped<int8_t>(io);
      default: return RunTyped<float>(io);
    }
  }

 private:
  template <typename T>
  void RunTyped(const KernelIO& io) const {
    const T* x = static_cast<const T*>(io.inputs[0]);
    T* y = static_cast<T*>(io.outputs[0]);
    const SpatialGeometry& g = geo_;
    const int64_t H = g.in[1], W = g.in[2], OH = g.out[1], OW = g.out[2], C = c_;
    const double cost = static_cast<double>(OW * C * g.kernel[1] * g.kernel[2]);
    io.pool->ParallelFor(n_ * OH, cost, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t img = r / OH, oh = r % OH;
        const T* xi = x + img * H * W * C;
        T* yr = y + r * OW * C;
        // The window's taps inside x, as offsets of their C-float runs.
        int64_t taps[kMaxTaps];
        const int64_t ih0 = oh * g.stride[1] - g.pad_begin[1];
        const bool rows_inside = ih0 >= 0 && ih0 + (g.kernel[1] - 1) * g.dilation[1] < H;
        const int nrel = static_cast<int>(rel_.size());
        for (int64_t ow = 0; ow < OW; ++ow, yr += C) {
          const int64_t iw0 = ow * g.stride[2] - g.pad_begin[2];
          if (rows_inside && iw0 >= 0 && iw0 + (g.kernel[2] - 1) * g.dilation[2] < W) {
            MaxOfRuns(xi + (ih0 * W + iw0) * C, rel_.data(), nrel, C, yr);
            continue;
          }
          int nt = 0;
          for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
            const int64_t ih = oh * g.stride[1] - g.pad_begin[1] + kh * g.dilation[1];
            if (ih < 0 || ih >= H) continue;
            for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
              const int64_t iw = ow * g.stride[2] - g.pad_begin[2] + kw * g.dilation[2];
              if (iw >= 0 && iw < W) taps[nt++] = (ih * W + iw) * C;
            }
          }
          MaxOfRuns(xi, taps, nt, C, yr);
        }
      }
    });
  }

  SpatialGeometry geo_;
  int64_t n_ = 0, c_ = 0;
  DType dtype_ = DType::kFloat32;
  std::vector<int64_t> rel_;
};

}  // namespace

void RegisterNhwcKernels(KernelRegistry& r) {
  r.Register(OpId::kNhwcConv, {DType::kFloat32, DType::kUInt8}, &MakeKernel<NhwcConvKernel>);
  r.Register(OpId::kNhwcMaxPool, {DType::kFloat32, DType::kUInt8, DType::kInt8}, &MakeKernel<NhwcMaxPoolKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
