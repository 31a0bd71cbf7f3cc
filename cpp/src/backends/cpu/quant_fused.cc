// kaiwu QLinearFused: an integer Conv or Gemm/MatMul over the packed operand
// of QPackWeights (layout: ops/quant.h QPackedLayout). uint8 x int8 products
// accumulate in int32 (quant_gemm.h micro tiles), then one epilogue per tile:
//   f = (acc + corr[c] - w_zp[c] * sum(x)) * mult[c] + bias[c] (+ residual),
//   activation, then y = saturate(round(f / y_scale) + y_zp) or f itself.
// Gemm: rows of X broadcast against 16-channel blocks of packed weights.
// Conv: the weights' rows broadcast against im2col lanes (4 taps per int32
// lane) of a chunk of images, so that outputs are written along pixels.
#include <algorithm>
#include <cstring>

#include "backends/cpu/activation.h"
#include "backends/cpu/quant_gemm.h"
#include "backends/cpu/quant_kernels.h"

namespace kaiwu {
namespace cpu {
namespace {

struct Header {
  int32_t any_wzp, x_zp;
  float inv_y_scale;
  int32_t y_zp;
};

inline int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

class QFusedKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    p_ = ctx.Params<QFusedParams>();
    act_ = p_.act;
    x_int8_ = ctx.in(0).dtype == DType::kInt8;
    const QPackedLayout L(p_.k, p_.n);
    kp_ = L.kp;
    threads_ = std::max(1, ctx.num_threads);
    QuantRange(p_.y_dtype == DType::kFloat32 ? DType::kUInt8 : p_.y_dtype, &lo_, &hi_);
    if (p_.conv) {
      P_ = p_.geo.out_size();
      images_ = ctx.in(0).shape[0];
      chunk_ = std::max<int64_t>(1, std::min<int64_t>(images_, (256 << 10) / std::max<int64_t>(1, kp_ * P_)));
      chunks_ = (images_ + chunk_ - 1) / chunk_;
      lanes_ = RoundUp(chunk_ * P_, 32);
      slot_bytes_ = RoundUp(kp_ * lanes_ + 4 * lanes_, 64);
      ctx.scratch_bytes = static_cast<size_t>(slot_bytes_ * threads_);
    } else {
      copy_x_ = x_int8_ || kp_ != p_.k;
      ctx.scratch_bytes = static_cast<size_t>(RoundUp((copy_x_ ? p_.rows * kp_ : 0) + 4 * p_.rows, 64));
    }
  }

  void Run(const KernelIO& io) const override {
    if (p_.conv) RunConv(io);
    else RunGemm(io);
  }

 private:
  // One output value from the int32 sum of channel c (f before the activation).
  template <typename Store>
  void Epilogue(const uint8_t* packed, int64_t count, const int32_t* acc, const int32_t* c_of,
                bool per_lane_channel, int64_t c0, const int32_t* xsum, bool per_lane_xsum,
                int32_t xsum0, const float* residual, const int64_t* out_index, Store store) const {
    const QPackedLayout L(p_.k, p_.n);
    const int32_t* corr = reinterpret_cast<const int32_t*>(packed + L.corr());
    const float* mult = reinterpret_cast<const float*>(packed + L.mult());
    const float* bias = reinterpret_cast<const float*>(packed + L.bias());
    const int32_t* wzp = reinterpret_cast<const int32_t*>(packed + L.wzp());
    float f[kQTileLanes];
    for (int64_t j = 0; j < count; ++j) {
      const int64_t c = per_lane_channel ? c_of[j] : c0;
      const int32_t xs = per_lane_xsum ? xsum[j] : xsum0;
      f[j] = static_cast<float>(acc[j] + corr[c] - wzp[c] * xs) * mult[c] + bias[c];
      if (residual) f[j] += residual[out_index[j]];
    }
    act_.Apply(f, count);
    store(f, count);
  }

  template <typename Y>
  void StoreValues(const float* f, int64_t count, const int64_t* out_index, float inv, float zp,
                   Y* y) const {
    for (int64_t j = 0; j < count; ++j) {
      if constexpr (std::is_same_v<Y, float>) {
        y[out_index[j]] = f[j];
      } else {
        float v = std::min(std::max(f[j] * inv + zp, lo_), hi_);
        v = (v + 12582912.f) - 12582912.f;  // round half to even (|v| < 2^22)
        y[out_index[j]] = static_cast<Y>(static_cast<int32_t>(v));
      }
    }
  }

  void StoreTile(const KernelIO& io, const Header& h, const float* f, int64_t count,
                 const int64_t* out_index) const {
    const float zp = static_cast<float>(h.y_zp);
    switch (p_.y_dtype) {
      case DType::kFloat32: StoreValues(f, count, out_index, 0.f, 0.f, static_cast<float*>(io.outputs[0])); break;
      case DType::kInt8: StoreValues(f, count, out_index, h.inv_y_scale, zp, static_cast<int8_t*>(io.outputs[0])); break;
      default: StoreValues(f, count, out_index, h.inv_y_scale, zp, static_cast<uint8_t*>(io.outputs[0])); break;
    }
  }

  void RunGemm(const KernelIO& io) const;
  void RunConv(const KernelIO& io) const;
  void ConvChunk(const KernelIO& io, const Header& h, int64_t chunk, uint8_t* slot, bool parallel) const;

  QFusedParams p_;
  Activation act_;
  bool x_int8_ = false, copy_x_ = false;
  int64_t kp_ = 0, P_ = 0, images_ = 0, chunk_ = 1, chunks_ = 1, lanes_ = 0, slot_bytes_ = 0;
  int threads_ = 1;
  float lo_ = 0.f, hi_ = 255.f;
};

void QFusedKernel::RunGemm(const KernelIO& io) const {
  const uint8_t* packed = static_cast<const uint8_t*>(io.inputs[1]);
  Header h;
  std::memcpy(&h, packed, sizeof(h));
  const int64_t rows = p_.rows, K = p_.k;
  const uint8_t* x = static_cast<const uint8_t*>(io.inputs[0]);
  int64_t ldx = K;
  uint8_t* scratch = static_cast<uint8_t*>(io.scratch);
  int32_t* rowsum = reinterpret_cast<int32_t*>(scratch + (copy_x_ ? rows * kp_ : 0));
  const bool need_sums = h.any_wzp != 0;
  if (copy_x_ || need_sums) {
    const uint8_t flip = x_int8_ ? 0x80 : 0;
    io.pool->ParallelFor(rows, 2.0 * K, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* src = x + r * K;
        int32_t s = 0;
        if (copy_x_) {
          uint8_t* dst = scratch + r * kp_;
          for (int64_t k = 0; k < K; ++k) dst[k] = src[k] ^ flip;
          for (int64_t k = K; k < kp_; ++k) dst[k] = 0;
          for (int64_t k = 0; k < K; ++k) s += dst[k];
        } else {
          for (int64_t k = 0; k < K; ++k) s += src[k];
        }
        rowsum[r] = s;
      }
    });
  }
  if (copy_x_) {
    x = scratch;
    ldx = kp_;
  }
  const QPackedLayout L(p_.k, p_.n);
  const uint8_t* w = packed + L.weights();
  const int64_t blocks = L.np / 16, col_tiles = (blocks + 1) / 2;
  const int64_t row_tiles = (rows + kQTileRows - 1) / kQTileRows;
  const float* residual = p_.has_residual ? static_cast<const float*>(io.inputs[2]) : nullptr;
  const QIsa isa = QGemmIsa();
  const double cost = 2.0 * kQTileRows * kQTileLanes * static_cast<double>(kp_);
  io.pool->ParallelFor(col_tiles * row_tiles, cost, [&](int64_t t0, int64_t t1) {
    alignas(64) int32_t acc[kQTileRows * kQTileLanes];
    int64_t index[kQTileLanes];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t ct = t / row_tiles, rt = t % row_tiles;
      const int64_t b0 = 2 * ct, nb = std::min<int64_t>(2, blocks - b0);
      const int64_t r0 = rt * kQTileRows, mr = std::min<int64_t>(kQTileRows, rows - r0);
      QMicroTile(isa, static_cast<int>(mr), static_cast<int>(nb), kp_ / 4, x + r0 * ldx, ldx,
                 w + b0 * kp_ * 16, 64, kp_ * 16, /*lanes_u8=*/false, acc);
      const int64_t c0 = b0 * 16, count = std::min<int64_t>(16 * nb, p_.n - c0);
      int32_t chans[kQTileLanes];
      for (int64_t j = 0; j < count; ++j) chans[j] = static_cast<int32_t>(c0 + j);
      for (int64_t r = 0; r < mr; ++r) {
        for (int64_t j = 0; j < count; ++j) index[j] = (r0 + r) * p_.n + c0 + j;
        Epilogue(packed, count, acc + r * kQTileLanes, chans, true, 0, nullptr, false,
                 need_sums ? rowsum[r0 + r] : 0, residual, index,
                 [&](const float* f, int64_t n) { StoreTile(io, h, f, n, index); });
      }
    }
  });
}

// Lanes l of a chunk are (image l / P, pixel l % P); lane quads hold 4
// consecutive k = (channel, tap) of one lane; padding taps read the x zero point.
void QFusedKernel::ConvChunk(const KernelIO& io, const Header& h, int64_t chunk, uint8_t* slot,
                             bool parallel) const {
  const SpatialGeometry& g = p_.geo;
  const int64_t img0 = chunk * chunk_, imgs = std::min(chunk_, images_ - img0);
  const int64_t L = imgs * P_, KK = g.kernel_size(), C = p_.k / KK;
  uint8_t* col = slot;
  int32_t* colsum = reinterpret_cast<int32_t*>(slot + kp_ * lanes_);
  const uint8_t* x = static_cast<const uint8_t*>(io.inputs[0]) + img0 * C * g.in_size();
  const uint8_t flip = x_int8_ ? 0x80 : 0, pad = static_cast<uint8_t>(h.x_zp);
  for (int64_t k = 0; k < kp_; ++k) {
    uint8_t* dst = col + (k / 4) * lanes_ * 4 + (k % 4);
    if (k >= p_.k) {
      for (int64_t l = 0; l < lanes_; ++l) dst[l * 4] = 0;
      continue;
    }
    const int64_t c = k / KK, t = k % KK;
    const int64_t kd = t / (g.kernel[1] * g.kernel[2]), kh = (t / g.kernel[2]) % g.kernel[1], kw = t % g.kernel[2];
    int64_t lo[3], hi[3];
    g.ValidRange(0, kd, &lo[0], &hi[0]);
    g.ValidRange(1, kh, &lo[1], &hi[1]);
    g.ValidRange(2, kw, &lo[2], &hi[2]);
    int64_t l = 0;
    for (int64_t im = 0; im < imgs; ++im) {
      const uint8_t* xc = x + (im * C + c) * g.in_size();
      for (int64_t od = 0; od < g.out[0]; ++od) {
        const int64_t id = od * g.stride[0] - g.pad_begin[0] + kd * g.dilation[0];
        for (int64_t oh = 0; oh < g.out[1]; ++oh) {
          const int64_t ih = oh * g.stride[1] - g.pad_begin[1] + kh * g.dilation[1];
          const bool row_ok = od >= lo[0] && od < hi[0] && oh >= lo[1] && oh < hi[1];
          const uint8_t* src = xc + (id * g.in[1] + ih) * g.in[2] + kw * g.dilation[2] - g.pad_begin[2];
          for (int64_t ow = 0; ow < g.out[2]; ++ow, ++l) {
            const bool ok = row_ok && ow >= lo[2] && ow < hi[2];
            dst[l * 4] = ok ? static_cast<uint8_t>(src[ow * g.stride[2]] ^ flip) : pad;
          }
        }
      }
    }
    for (; l < lanes_; ++l) dst[l * 4] = 0;
  }
  const bool need_sums = h.any_wzp != 0;
  if (need_sums) {
    std::fill(colsum, colsum + lanes_, 0);
    for (int64_t k = 0; k < p_.k; ++k) {
      const uint8_t* src = col + (k / 4) * lanes_ * 4 + (k % 4);
      for (int64_t l = 0; l < lanes_; ++l) colsum[l] += src[l * 4];
    }
  }
  const uint8_t* packed = static_cast<const uint8_t*>(io.inputs[1]);
  const uint8_t* w = packed + QPackedLayout(p_.k, p_.n).weights();
  const float* residual = p_.has_residual ? static_cast<const float*>(io.inputs[2]) : nullptr;
  const QIsa isa = QGemmIsa();
  const int64_t lane_tiles = (L + kQTileLanes - 1) / kQTileLanes;
  const int64_t row_tiles = (p_.n + kQTileRows - 1) / kQTileRows;
  auto tiles = [&](int64_t t0, int64_t t1) {
    alignas(64) int32_t acc[kQTileRows * kQTileLanes];
    int64_t index[kQTileLanes];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t lt = t / row_tiles, rt = t % row_tiles;
      const int64_t l0 = lt * kQTileLanes, count = std::min<int64_t>(kQTileLanes, L - l0);
      const int nb = count > 16 ? 2 : 1;
      const int64_t c0 = rt * kQTileRows, mr = std::min<int64_t>(kQTileRows, p_.n - c0);
      QMicroTile(isa, static_cast<int>(mr), nb, kp_ / 4, w + c0 * kp_, kp_, col + l0 * 4, lanes_ * 4,
                 64, /*lanes_u8=*/true, acc);
      for (int64_t r = 0; r < mr; ++r) {
        const int64_t c = c0 + r;
        for (int64_t j = 0; j < count; ++j) {
          const int64_t l = l0 + j, im = l / P_, px = l % P_;
          index[j] = ((img0 + im) * p_.n + c) * P_ + px;
        }
        Epilogue(packed, count, acc + r * kQTileLanes, nullptr, false, c, colsum + l0, need_sums, 0,
                 residual, index, [&](const float* f, int64_t n) { StoreTile(io, h, f, n, index); });
      }
    }
  };
  const int64_t ntiles = lane_tiles * row_tiles;
  if (parallel) io.pool->ParallelFor(ntiles, 2.0 * kQTileRows * kQTileLanes * kp_, tiles);
  else tiles(0, ntiles);
}

void QFusedKernel::RunConv(const KernelIO& io) const {
  Header h;
  std::memcpy(&h, io.inputs[1], sizeof(h));
  uint8_t* scratch = static_cast<uint8_t*>(io.scratch);
  if (chunks_ < threads_) {
    for (int64_t c = 0; c < chunks_; ++c) ConvChunk(io, h, c, scratch, /*parallel=*/true);
    return;
  }
  // One scratch slot per thread; slot s takes chunks s, s + T, ...
  io.pool->ParallelFor(threads_, 1e12, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s)
      for (int64_t c = s; c < chunks_; c += threads_) ConvChunk(io, h, c, scratch + s * slot_bytes_, false);
  });
}

}  // namespace

void RegisterQuantFusedKernels(KernelRegistry& r) {
  r.Register(OpId::kQLinearFused, {DType::kUInt8, DType::kInt8}, &MakeKernel<QFusedKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
