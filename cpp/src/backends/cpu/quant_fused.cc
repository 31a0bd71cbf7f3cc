// kaiwu QLinearFused: an integer Conv or Gemm/MatMul over the packed operand
// of QPackWeights (layout: ops/quant.h QPackedLayout). uint8 x int8 products
// accumulate in int32 (quant_gemm.h micro tiles), then one epilogue per tile:
//   f = (acc + corr[c] - w_zp[c] * sum(x)) * mult[c] + bias[c] (+ residual),
//   activation, then y = saturate(round(f / y_scale) + y_zp) or f itself.
// Gemm: rows of X broadcast against 16-channel blocks of packed weights.
// Conv: the weights' rows broadcast against im2col lanes (4 taps per int32
// lane) of a chunk of images, so that outputs are written along pixels.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "backends/cpu/activation.h"
#include "backends/cpu/quant_gemm.h"
#include "backends/cpu/quant_im2col.h"
#include "backends/cpu/quant_kernels.h"

namespace kaiwu {
namespace cpu {
namespace {

struct Header {
  int32_t any_wzp, x_zp;
  float inv_y_scale;
  int32_t y_zp;
  int32_t pairs_fit_int16;  // see QMicroTile
  int32_t no_min;           // no weight is -128: see QMicroTileShiftedAvx2
  int32_t gemm_blocks;      // weights in the Gemm blocks, not rows (ops/quant.h)
  int32_t row_bytes;        // packed bytes per kernel row, or 0
};

// The product path of a run: AMX tiles where the CPU has them and K is at
// least 64 (the quads past the last whole 64 of K, and the rows of a tile past
// its last whole 16, go to the VNNI tiles); the shifted AVX2 tiles
// (activations enter as x - 128) for full-range weights without -128; else
// QMicroTile. Rows per tile: kQAmxRows for AMX, 4 for the shifted tiles (their
// register budget), else kQTileRows.
struct TilePath {
  QIsa isa;
  bool amx, shifted;
  int rows;
  TilePath(QIsa i, const Header& h, int64_t kp)
      : isa(i == QIsa::kAmx ? QIsa::kAvx512Vnni : i),
        amx(i == QIsa::kAmx && kp >= 64),
        shifted(i == QIsa::kAvx2 && !h.pairs_fit_int16 && h.no_min),
        rows(amx ? kQAmxRows : shifted ? 4 : kQTileRows) {}
  // ThreadPool cost units (about 0.15 ns each) of one tile call: the epilogue's
  // few per output, and the products at this path's rate (AMX takes ~1024
  // multiply-adds a cycle, VNNI 128, AVX2 ~32).
  double TileCost(int64_t kp) const {
    const double per_mac = amx ? 0.01 : isa == QIsa::kAvx512Vnni ? 0.03 : isa == QIsa::kAvx2 ? 0.08 : 2.0;
    return rows * kQTileLanes * (3.0 + per_mac * static_cast<double>(kp));
  }
  // acc: row r at acc + r * kQTileLanes. Callers of an AMX path hold a QAmxScope.
  void Tile(int mr, int nb, int64_t kq, const uint8_t* bcast, int64_t ldb, const uint8_t* lanes,
            int64_t q_stride, int64_t blk_stride, bool lanes_x, int32_t* acc, const Header& h) const {
    if (amx) {
      const int whole = mr / 16;
      const int64_t ks = kq / 16, tail_q = kq - 16 * ks;
      if (whole) {
        QAmxTile(whole, nb, ks, bcast, ldb, lanes, q_stride, blk_stride, /*a_signed=*/lanes_x, acc);
        if (tail_q) {
          alignas(64) int32_t part[kQTileRows * kQTileLanes];
          for (int r = 0; r < 16 * whole; r += kQTileRows) {
            const int rr = std::min(kQTileRows, 16 * whole - r);
            QMicroTile(isa, rr, nb, tail_q, bcast + r * ldb + 64 * ks, ldb, lanes + 16 * ks * q_stride, q_stride,
                       blk_stride, lanes_x, part);
            for (int i = 0; i < rr; ++i)
              for (int j = 0; j < 16 * nb; ++j) acc[(r + i) * kQTileLanes + j] += part[i * kQTileLanes + j];
          }
        }
      }
      for (int r = 16 * whole; r < mr; r += kQTileRows)
        QMicroTile(isa, std::min(kQTileRows, mr - r), nb, kq, bcast + r * ldb, ldb, lanes, q_stride, blk_stride,
                   lanes_x, acc + r * kQTileLanes);
      return;
    }
    if (shifted) QMicroTileShiftedAvx2(mr, nb, kq, bcast, ldb, lanes, q_stride, blk_stride, lanes_x, acc);
    else QMicroTile(isa, mr, nb, kq, bcast, ldb, lanes, q_stride, blk_stride, lanes_x, acc, h.pairs_fit_int16 != 0);
  }
};

// int32 sums of one tile call, rows of kQTileLanes (the AMX tiles' rows).
constexpr int kAccRows = kQAmxRows > kQTileRows ? kQAmxRows : kQTileRows;
static_assert(kQAmxLanes == kQTileLanes, "one acc row stride for every path");

inline int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// dst[i] = src[i] ^ flip for i < n in registers: 32 bytes a step, then 16 and
// 8, then bytes. The runs are short (KW * C or C bytes: 32 for a Nature CNN's
// first conv, 48 for IMPALA's), where a memcpy call per run cost more than
// the copy.
using Bytes32 = uint8_t __attribute__((vector_size(32), aligned(1)));
using Bytes16 = uint8_t __attribute__((vector_size(16), aligned(1)));
template <bool kFlip>
inline void CopyFlip(uint8_t* dst, const uint8_t* src, int64_t n, uint8_t flip) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    Bytes32 v;
    std::memcpy(&v, src + i, 32);
    if (kFlip) v ^= flip;
    std::memcpy(dst + i, &v, 32);
  }
  if (i + 16 <= n) {
    Bytes16 v;
    std::memcpy(&v, src + i, 16);
    if (kFlip) v ^= flip;
    std::memcpy(dst + i, &v, 16);
    i += 16;
  }
  if (i + 8 <= n) {
    uint64_t v;
    std::memcpy(&v, src + i, 8);
    if (kFlip) v ^= flip * 0x0101010101010101ull;
    std::memcpy(dst + i, &v, 8);
    i += 8;
  }
  for (; i < n; ++i) dst[i] = kFlip ? src[i] ^ flip : src[i];
}

// Rows of a channels-last conv chunk come in multiples of this: whole tiles of
// every path (32 AMX, 6 VNNI / AVX2, 4 shifted AVX2).
constexpr int64_t kChunkRows = 96;

class QFusedKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    CheckQIsaEnv();
    p_ = ctx.Params<QFusedParams>();
    node_ = ctx.node.Describe();
    act_ = p_.act;
    x_int8_ = ctx.in(0).dtype == DType::kInt8;
    const QPackedLayout L(p_.k_packed, p_.n);
    kp_ = L.kp;
    threads_ = std::max(1, ctx.num_threads);
    QuantRange(p_.y_dtype == DType::kFloat32 ? DType::kUInt8 : p_.y_dtype, &lo_, &hi_);
    if (p_.conv && p_.channels_last && p_.row_bytes) {
      KAIWU_CHECK(QPackedLayout(p_.k_packed, p_.n).dot_tail() == 0, StatusCode::kUnsupported, node_,
                  ": row_bytes needs the output channels in whole 16-lane tiles (n % 16 == 0 or > ",
                  QPackedLayout::kQDotTail, "), got n=", p_.n);
      images_ = ctx.in(0).shape[0];
      PrepareInPlace();
      ctx.scratch_bytes = static_cast<size_t>(slot_bytes_ * std::min<int64_t>(threads_, tasks_));
    } else if (p_.conv && p_.channels_last) {
      // Rows of the product are output pixels; a task gathers a chunk of them
      // (a multiple of kChunkRows, about 96 KiB) into its thread's slot, with
      // few enough rows a chunk that every thread gets one where the batch is small.
      P_ = p_.geo.out_size();
      images_ = ctx.in(0).shape[0];
      const int64_t rows = images_ * P_;
      int64_t r = std::max<int64_t>(1, (96 << 10) / (kp_ * kChunkRows)) * kChunkRows;
      const int64_t even = RoundUp((rows + threads_ - 1) / threads_, kChunkRows);
      chunk_ = std::max<int64_t>(kChunkRows, std::min({r, even, int64_t{16} * kChunkRows}));
      chunks_ = (rows + chunk_ - 1) / chunk_;
      slot_bytes_ = RoundUp(chunk_ * kp_ + 4 * chunk_, 64);  // rows, row sums
      ctx.scratch_bytes = static_cast<size_t>(slot_bytes_ * std::min<int64_t>(threads_, chunks_));
    } else if (p_.conv) {
      P_ = p_.geo.out_size();
      images_ = ctx.in(0).shape[0];
      chunk_ = std::max<int64_t>(1, std::min<int64_t>(images_, (256 << 10) / std::max<int64_t>(1, kp_ * P_)));
      chunks_ = (images_ + chunk_ - 1) / chunk_;
      lanes_ = RoundUp(chunk_ * P_, 32);
      slot_bytes_ = RoundUp(kp_ * lanes_ + 4 * lanes_, 64);  // quads, column sums
      ctx.scratch_bytes = static_cast<size_t>(slot_bytes_ * threads_);
    } else {
      copy_x_ = x_int8_ || kp_ != p_.k;  // the shifted path copies always
      ctx.scratch_bytes = static_cast<size_t>(RoundUp(p_.rows * kp_ + 4 * p_.rows, 64));
    }
  }

  void Run(const KernelIO& io) const override {
    Header h;
    std::memcpy(&h, io.inputs[1], sizeof(h));
    // Products with pixels or Gemm rows as rows read the Gemm blocks; NCHW convs the rows.
    const bool want_blocks = !p_.conv || p_.channels_last;
    KAIWU_CHECK((h.gemm_blocks != 0) == want_blocks, StatusCode::kUnsupported, node_,
                ": the packed weights are in ", h.gemm_blocks ? "Gemm blocks" : "rows", ", but this ",
                p_.conv ? (p_.channels_last ? "channels-last conv" : "NCHW conv") : "Gemm", " reads ",
                want_blocks ? "Gemm blocks (QPackWeights gemm_layout=1 for a channels-last conv)" : "rows");
    KAIWU_CHECK(h.row_bytes == p_.row_bytes, StatusCode::kUnsupported, node_, ": the packed weights have ",
                h.row_bytes, " bytes per kernel row, but this conv reads ", p_.row_bytes,
                " (QPackWeights row_bytes must match QLinearFused's)");
    if (p_.conv && p_.channels_last && p_.row_bytes) RunConvInPlace(io);
    else if (p_.conv && p_.channels_last) RunConvNhwc(io);
    else if (p_.conv) RunConv(io);
    else RunGemm(io);
  }

 private:
  // Writes f[0, count) (the values before residual and activation) to the
  // output at element offset `off`: + residual, activation, quantize, store.
  void EmitRun(const KernelIO& io, const Header& h, float* f, int64_t count, int64_t off) const {
    if (p_.has_residual) {
      const float* res = static_cast<const float*>(io.inputs[2]) + off;
      for (int64_t j = 0; j < count; ++j) f[j] += res[j];
    }
    if (act_.active()) act_.Apply(f, count);
    // Locals, not members: byte stores through y could alias members, which
    // would keep the loops from vectorizing.
    const float inv = h.inv_y_scale, zp = static_cast<float>(h.y_zp), lo = lo_, hi = hi_;
    if (p_.y_dtype != DType::kFloat32 && QGemmIsa() != QIsa::kScalar) {
      QuantizeBytesAvx2(f, count, inv, /*divide=*/false, zp, lo, hi, p_.y_dtype == DType::kInt8,
                        static_cast<uint8_t*>(io.outputs[0]) + off);
      return;
    }
    switch (p_.y_dtype) {
      case DType::kFloat32:
        std::memcpy(static_cast<float*>(io.outputs[0]) + off, f, sizeof(float) * count);
        break;
      case DType::kInt8: {
        int8_t* y = static_cast<int8_t*>(io.outputs[0]) + off;
        for (int64_t j = 0; j < count; ++j)
          y[j] = static_cast<int8_t>(static_cast<int32_t>(QuantizeValue(f[j] * inv, zp, lo, hi)));
        break;
      }
      default: {
        uint8_t* y = static_cast<uint8_t*>(io.outputs[0]) + off;
        for (int64_t j = 0; j < count; ++j)
          y[j] = static_cast<uint8_t>(static_cast<int32_t>(QuantizeValue(f[j] * inv, zp, lo, hi)));
        break;
      }
    }
  }

  // The sections of the packed operand (ops/quant.h QPackedLayout).
  struct Operands {
    const uint8_t* w;
    const int32_t *corr, *wzp, *wsum;
    const float *mult, *bias;
  };
  Operands Packed(const KernelIO& io) const;
  int64_t GemmTasks(int64_t rows, const TilePath& path) const;
  // Row tiles of a product whose rows are rows of x (row r at x + r * ldx,
  // row sums at rowsum when weights have zero points), written as output rows
  // out_row0 + r: tasks [t0, t1) of GemmTasks(rows, path).
  void GemmTiles(const KernelIO& io, const Header& h, const TilePath& path, const Operands& op,
                 const uint8_t* x, int64_t ldx, const int32_t* rowsum, int64_t rows, int64_t out_row0,
                 int64_t t0, int64_t t1) const;
  void EmitRows(const KernelIO& io, const Header& h, const Operands& op, bool shifted, const int32_t* acc,
                int64_t acc_ld, const int32_t* xsum, int64_t mr, int64_t c0, int64_t count, int64_t out_row) const;
  void EmitRows16(const KernelIO& io, const Header& h, const Operands& op, bool shifted, const int32_t* acc,
                  int64_t acc_ld, const int32_t* xsum, int64_t mr, int64_t c0, int64_t count,
                  int64_t out_row) const;
  void RunGemm(const KernelIO& io) const;
  void RunConv(const KernelIO& io) const;
  void RunConvNhwc(const KernelIO& io) const;
  void NhwcRows(const KernelIO& io, const Header& h, uint8_t shift, int64_t r0, int64_t nr, uint8_t* col,
                int32_t* rowsum) const;
  template <bool kFlip>
  void NhwcRowsT(const uint8_t* x, uint8_t flip, uint8_t padv, uint8_t shift, bool need_sums, int64_t r0,
                 int64_t nr, uint8_t* col, int32_t* rowsum) const;
  void ConvChunk(const KernelIO& io, const Header& h, int64_t chunk, uint8_t* slot, bool parallel) const;
  // Channels-last convs whose kernel rows are packed in row_bytes (RunConvInPlace).
  void PrepareInPlace();
  void RunConvInPlace(const KernelIO& io) const;
  void PadBand(const uint8_t* x, int64_t img, int64_t ih_lo, int64_t rows, uint8_t flip, uint8_t padv,
               uint8_t* band) const;
  void BandTiles(const KernelIO& io, const Header& h, const TilePath& path, const Operands& op, int64_t img,
                 int64_t oh0, int64_t oh1, int64_t ih_lo, const uint8_t* band, uint8_t shift) const;

  QFusedParams p_;
  std::string node_;
  Activation act_;
  bool x_int8_ = false, copy_x_ = false;
  int64_t kp_ = 0, P_ = 0, images_ = 0, chunk_ = 1, chunks_ = 1, lanes_ = 0, slot_bytes_ = 0;
  // RunConvInPlace: bytes of a padded input row, output rows per band, bands per image, tasks.
  int64_t row_stride_ = 0, band_oh_ = 1, bands_ = 1, tasks_ = 1;
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
  int32_t* rowsum = reinterpret_cast<int32_t*>(scratch + rows * kp_);
  const bool need_sums = h.any_wzp != 0;
  const TilePath path(QGemmIsa(), h, kp_);
  const bool copy_x = copy_x_ || path.shifted;
  // The copy holds x in the uint8 domain (x + 128 for int8 x), or x - 128
  // for the shifted tiles; sums are of the uint8 domain.
  const uint8_t shift = path.shifted ? 0x80 : 0;
  if (copy_x || need_sums) {
    const uint8_t to_u8 = x_int8_ ? 0x80 : 0, flip = to_u8 ^ shift;
    io.pool->ParallelFor(rows, 2.0 * K, [&](int64_t r0, int64_t r1) {
      // Everything the loops read in locals: byte stores through dst could
      // alias the captures, which keeps the loops scalar (a byte a cycle).
      const uint8_t f = flip, u = to_u8;
      const int64_t kk = K, kp = kp_;
      const bool copy = copy_x, sums = need_sums;
      const uint8_t* const xs = x;
      uint8_t* const buf = scratch;
      int32_t* const rs = rowsum;
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* src = xs + r * kk;
        if (copy) {
          uint8_t* dst = buf + r * kp;
          for (int64_t k = 0; k < kk; ++k) dst[k] = src[k] ^ f;
          for (int64_t k = kk; k < kp; ++k) dst[k] = 0;
        }
        if (sums) {
          int32_t s = 0;
          for (int64_t k = 0; k < kk; ++k) s += src[k] ^ u;
          rs[r] = s;
        }
      }
    });
  }
  if (copy_x) {
    x = scratch;
    ldx = kp_;
  }
  const Operands op = Packed(io);
  io.pool->ParallelFor(GemmTasks(rows, path), path.TileCost(kp_),
                       [&](int64_t t0, int64_t t1) {
                         GemmTiles(io, h, path, op, x, ldx, need_sums ? rowsum : nullptr, rows, 0, t0, t1);
                       });
}

QFusedKernel::Operands QFusedKernel::Packed(const KernelIO& io) const {
  const uint8_t* packed = static_cast<const uint8_t*>(io.inputs[1]);
  const QPackedLayout L(p_.k_packed, p_.n);
  return {packed + L.weights(),
          reinterpret_cast<const int32_t*>(packed + L.corr()),
          reinterpret_cast<const int32_t*>(packed + L.wzp()),
          reinterpret_cast<const int32_t*>(packed + L.wsum()),
          reinterpret_cast<const float*>(packed + L.mult()),
          reinterpret_cast<const float*>(packed + L.bias())};
}

// Tiles over the blocks of 16 channels, then (dot_tail) row dots for the
// channels of the last block stored as rows, one task per row tile.
int64_t QFusedKernel::GemmTasks(int64_t rows, const TilePath& path) const {
  const QPackedLayout L(p_.k_packed, p_.n);
  const int64_t tail = L.dot_tail();
  const int64_t blocks = (tail ? p_.n - tail : L.np) / 16, col_tiles = (blocks + 1) / 2;
  const int64_t row_tiles = (rows + path.rows - 1) / path.rows;
  return col_tiles * row_tiles + (tail ? row_tiles : 0);
}

// The epilogue of one tile: rows [0, mr) of int32 sums (row r at acc + r *
// acc_ld) of channels c0 .. c0 + count, as output rows out_row .. out_row + mr.
// The floats of the whole tile first (per-channel constants loaded once),
// then, for a quantized output without residual or activation, one call
// quantizes every row; else EmitRun row by row.
void QFusedKernel::EmitRows(const KernelIO& io, const Header& h, const Operands& op, bool shifted,
                            const int32_t* acc, int64_t acc_ld, const int32_t* xsum, int64_t mr, int64_t c0,
                            int64_t count, int64_t out_row) const {
  if (count % 16 == 0 && !p_.has_residual && p_.y_dtype != DType::kFloat32 && QGemmIsa() != QIsa::kScalar &&
      (act_.kind == FusedActivation::Kind::kNone || act_.kind == FusedActivation::Kind::kRelu))
    return EmitRows16(io, h, op, shifted, acc, acc_ld, xsum, mr, c0, count, out_row);
  alignas(64) int32_t cc[kQTileLanes], wz[kQTileLanes];
  alignas(64) float m[kQTileLanes], b[kQTileLanes];
  // Plain copies (a conditional in the loop made GCC gather).
  const size_t bytes = sizeof(int32_t) * static_cast<size_t>(count);
  std::memcpy(cc, op.corr + c0, bytes);
  std::memcpy(wz, op.wzp + c0, bytes);
  std::memcpy(m, op.mult + c0, bytes);
  std::memcpy(b, op.bias + c0, bytes);
  if (shifted)
    for (int64_t j = 0; j < count; ++j) cc[j] += 128 * op.wsum[c0 + j];
  alignas(64) float f[kAccRows * kQTileLanes];
  for (int64_t r = 0; r < mr; ++r) {
    const int32_t* a = acc + r * acc_ld;
    float* fr = f + r * kQTileLanes;
    const int32_t xs = xsum ? xsum[r] : 0;
    for (int64_t j = 0; j < count; ++j) fr[j] = static_cast<float>(a[j] + cc[j] - wz[j] * xs) * m[j] + b[j];
  }
  const int64_t n = p_.n;
  if (p_.has_residual || act_.active() || p_.y_dtype == DType::kFloat32 || QGemmIsa() == QIsa::kScalar) {
    for (int64_t r = 0; r < mr; ++r) EmitRun(io, h, f + r * kQTileLanes, count, (out_row + r) * n + c0);
    return;
  }
  QuantizeRows(f, kQTileLanes, mr, count, h.inv_y_scale, /*divide=*/false, static_cast<float>(h.y_zp), lo_, hi_,
               p_.y_dtype == DType::kInt8, static_cast<uint8_t*>(io.outputs[0]) + out_row * n + c0, n);
}

// EmitRows for whole blocks of 16 channels, a quantized output, no residual
// and no activation or Relu: a vector of channels at a time from the int32
// sums to the bytes, no float rows in between. The operations of EmitRows and
// QuantizeRows in their order (in this file, so that the compiler fuses the
// same multiply-adds as in EmitRows), hence the same bytes.
// Lanes of EmitRows16's vectors: the build's widest registers (GCC splits
// wider vector types into scalar code for selects).
#if defined(__AVX512F__)
constexpr int kEmitLanes = 16;
#else
constexpr int kEmitLanes = 8;
#endif

void QFusedKernel::EmitRows16(const KernelIO& io, const Header& h, const Operands& op, bool shifted,
                              const int32_t* acc, int64_t acc_ld, const int32_t* xsum, int64_t mr, int64_t c0,
                              int64_t count, int64_t out_row) const {
  constexpr int L = kEmitLanes;
  using FV = float __attribute__((vector_size(4 * L)));
  using IV = int32_t __attribute__((vector_size(4 * L)));
  using UV = uint8_t __attribute__((vector_size(L)));
  using BV = uint8_t __attribute__((vector_size(4 * L)));
  const int64_t n = p_.n;
  const bool relu = act_.kind == FusedActivation::Kind::kRelu;
  const FV inv = FV{} + h.inv_y_scale, zp = FV{} + static_cast<float>(h.y_zp), lo = FV{} + lo_,
           hi = FV{} + hi_, big = FV{} + 4194304.f, nbig = FV{} - 4194304.f, magic = FV{} + 12582912.f;
  uint8_t* y = static_cast<uint8_t*>(io.outputs[0]) + out_row * n + c0;
  for (int64_t cb = 0; cb < count; cb += L) {
    IV cc, wz;
    FV m, b;
    std::memcpy(&cc, op.corr + c0 + cb, 4 * L);
    std::memcpy(&wz, op.wzp + c0 + cb, 4 * L);
    std::memcpy(&m, op.mult + c0 + cb, 4 * L);
    std::memcpy(&b, op.bias + c0 + cb, 4 * L);
    if (shifted) {
      IV ws;
      std::memcpy(&ws, op.wsum + c0 + cb, 4 * L);
      cc += 128 * ws;
    }
    for (int64_t r = 0; r < mr; ++r) {
      IV a;
      std::memcpy(&a, acc + r * acc_ld + cb, 4 * L);
      const IV t = xsum ? a + cc - wz * xsum[r] : a + cc;
      FV v = __builtin_convertvector(t, FV) * m + b;
      if (relu) v = v > 0.f ? v : FV{};
      v = v * inv;
      v = v > nbig ? v : nbig;  // NaN -> -2^22
      v = v < big ? v : big;
      v = (v + magic) - magic;  // round half to even
      v = v + zp;
      v = v > lo ? v : lo;
      v = v < hi ? v : hi;
      const IV q = __builtin_convertvector(v, IV);  // integers in [lo, hi]: exact
      // Each lane's low byte is its uint8 or int8 value (lo >= -128, hi <= 255);
      // a byte shuffle, where a narrowing conversion came out lane by lane.
      BV bytes;
      std::memcpy(&bytes, &q, sizeof(q));
#if defined(__AVX512F__)
      const UV u8 = __builtin_shufflevector(bytes, bytes, 0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60);
#else
      const UV u8 = __builtin_shufflevector(bytes, bytes, 0, 4, 8, 12, 16, 20, 24, 28);
#endif
      std::memcpy(y + r * n + cb, &u8, L);
    }
  }
}

void QFusedKernel::GemmTiles(const KernelIO& io, const Header& h, const TilePath& path, const Operands& op,
                             const uint8_t* x, int64_t ldx, const int32_t* rowsum, int64_t rows,
                             int64_t out_row0, int64_t t0, int64_t t1) const {
  const QPackedLayout L(p_.k_packed, p_.n);
  const int64_t tail = L.dot_tail(), tail_c0 = p_.n - tail;
  const int64_t blocks = (tail ? tail_c0 : L.np) / 16, col_tiles = (blocks + 1) / 2;
  const int64_t row_tiles = (rows + path.rows - 1) / path.rows, tile_tasks = col_tiles * row_tiles;
  auto emit = [&](const int32_t* acc, int64_t acc_ld, int64_t r0, int64_t mr, int64_t c0, int64_t count) {
    EmitRows(io, h, op, path.shifted, acc, acc_ld, rowsum ? rowsum + r0 : nullptr, mr, c0, count,
             out_row0 + r0);
  };
  const QAmxScope amx(path.amx);
  alignas(64) int32_t acc[kAccRows * kQTileLanes];
  for (int64_t t = t0; t < t1; ++t) {
    if (t >= tile_tasks) {
      const int64_t r0 = (t - tile_tasks) * path.rows, mr = std::min<int64_t>(path.rows, rows - r0);
      QRowDots(path.isa, path.shifted, h.pairs_fit_int16 != 0, static_cast<int>(mr), static_cast<int>(tail),
               kp_, x + r0 * ldx, ldx, op.w + (tail_c0 / 16) * kp_ * 16, acc);
      emit(acc, tail, r0, mr, tail_c0, tail);
      continue;
    }
    const int64_t ct = t / row_tiles, rt = t % row_tiles;
    const int64_t b0 = 2 * ct, nb = std::min<int64_t>(2, blocks - b0);
    const int64_t r0 = rt * path.rows, mr = std::min<int64_t>(path.rows, rows - r0);
    path.Tile(static_cast<int>(mr), static_cast<int>(nb), kp_ / 4, x + r0 * ldx, ldx,
              op.w + b0 * kp_ * 16, 64, kp_ * 16, /*lanes_x=*/false, acc, h);
    const int64_t c0 = b0 * 16;
    emit(acc, kQTileLanes, r0, mr, c0, std::min<int64_t>(16 * nb, p_.n - c0));
  }
}

// Channels-last conv (NHWC x and y, weights packed as [M, KH, KW, C]): the
// product's rows are output pixels, gathered chunk by chunk into rows of
// k = (kh, kw, c) bytes (runs of KW * C or C input bytes; padding taps read
// the x zero point), then GemmTiles over each chunk in its thread's slot.
void QFusedKernel::NhwcRows(const KernelIO& io, const Header& h, uint8_t shift, int64_t r0, int64_t nr,
                            uint8_t* col, int32_t* rowsum) const {
  const uint8_t* x = static_cast<const uint8_t*>(io.inputs[0]);
  const uint8_t flip = (x_int8_ ? 0x80 : 0) ^ shift, padv = static_cast<uint8_t>(h.x_zp) ^ shift;
  const bool need_sums = h.any_wzp != 0;
  if (flip) NhwcRowsT<true>(x, flip, padv, shift, need_sums, r0, nr, col, rowsum);
  else NhwcRowsT<false>(x, flip, padv, shift, need_sums, r0, nr, col, rowsum);
}

template <bool kFlip>
void QFusedKernel::NhwcRowsT(const uint8_t* x, uint8_t flip, uint8_t padv, uint8_t shift, bool need_sums,
                             int64_t r0, int64_t nr, uint8_t* col, int32_t* rowsum) const {
  const SpatialGeometry& g = p_.geo;
  const int64_t KK = g.kernel_size(), C = p_.k / KK, K = p_.k, kp = kp_;
  const int64_t H = g.in[1], W = g.in[2], OW = g.out[2], KH = g.kernel[1], KW = g.kernel[2];
  const int64_t sh = g.stride[1], sw = g.stride[2], dh = g.dilation[1], dw = g.dilation[2];
  const int64_t ph = g.pad_begin[1], pw = g.pad_begin[2], run = KW * C;
  // (img, oh, ow) of row r0, then stepped row by row (no divisions per row).
  int64_t img = r0 / P_, oh = (r0 % P_) / OW, ow = r0 % OW;
  for (int64_t r = 0; r < nr; ++r) {
    uint8_t* dst = col + r * kp;
    const int64_t iw0 = ow * sw - pw;
    const bool inside_w = dw == 1 && iw0 >= 0 && iw0 + KW <= W;
    const uint8_t* image = x + img * H * W * C;
    for (int64_t kh = 0; kh < KH; ++kh) {
      uint8_t* d = dst + kh * run;
      const int64_t ih = oh * sh - ph + kh * dh;
      if (ih < 0 || ih >= H) {
        std::memset(d, padv, static_cast<size_t>(run));
        continue;
      }
      const uint8_t* row = image + ih * W * C;
      if (inside_w) {
        CopyFlip<kFlip>(d, row + iw0 * C, run, flip);
        continue;
      }
      for (int64_t kw = 0; kw < KW; ++kw) {
        const int64_t iw = iw0 + kw * dw;
        if (iw < 0 || iw >= W) std::memset(d + kw * C, padv, static_cast<size_t>(C));
        else CopyFlip<kFlip>(d + kw * C, row + iw * C, C, flip);
      }
    }
    if (kp > K) std::memset(dst + K, 0, static_cast<size_t>(kp - K));
    if (need_sums) {
      int32_t sum = 0;
      for (int64_t k = 0; k < K; ++k) sum += dst[k] ^ shift;
      rowsum[r] = sum;
    }
    if (++ow == OW) {
      ow = 0;
      if (++oh == g.out[1]) {
        oh = 0;
        ++img;
      }
    }
  }
}

void QFusedKernel::RunConvNhwc(const KernelIO& io) const {
  Header h;
  std::memcpy(&h, io.inputs[1], sizeof(h));
  const TilePath path(QGemmIsa(), h, kp_);
  const uint8_t shift = path.shifted ? 0x80 : 0;  // the shifted tiles read x - 128
  const Operands op = Packed(io);
  // Threads that pay for themselves, by ThreadPool's rule (about sqrt(work /
  // its minimum task) of them): the tiles and about a unit a gathered byte.
  const int64_t rows = images_ * P_;
  const double work = static_cast<double>(chunks_) *
                      (static_cast<double>(GemmTasks(chunk_, path)) * path.TileCost(kp_) +
                       static_cast<double>(chunk_ * kp_));
  const int64_t slots = std::max<int64_t>(
      1, std::min<int64_t>({threads_, chunks_, static_cast<int64_t>(std::sqrt(work / 20000.0))}));
  uint8_t* scratch = static_cast<uint8_t*>(io.scratch);
  // One slot per thread; slot s takes chunks s, s + slots, ...
  io.pool->ParallelFor(slots, 1e12, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      uint8_t* col = scratch + s * slot_bytes_;
      int32_t* rowsum = reinterpret_cast<int32_t*>(col + chunk_ * kp_);
      for (int64_t c = s; c < chunks_; c += slots) {
        const int64_t r0 = c * chunk_, nr = std::min(chunk_, rows - r0);
        NhwcRows(io, h, shift, r0, nr, col, rowsum);
        GemmTiles(io, h, path, op, col, kp_, h.any_wzp ? rowsum : nullptr, nr, r0, 0, GemmTasks(nr, path));
      }
    }
  });
}

// Channels-last conv reading its product's rows in place. The packed
// weights hold each kernel row's KW * C taps in row_bytes bytes (zeros after
// them), so that for kernel row kh the taps of output pixel (oh, ow) are one
// run of input bytes: row oh * sh - ph + kh * dh, from column ow * sw - pw.
// A task copies the input rows of a band of output rows into its slot with
// the padding (the x zero point) around them, then runs the tiles straight
// over that copy: rows of a tile are consecutive pixels of one output row
// (row stride sw * C), one K segment per kernel row (dh padded rows apart).
// AMX tiles take 16 or 32 rows even where the output row has fewer left;
// the rows past its end read the slack after the band and are not written.
void QFusedKernel::PrepareInPlace() {
  const SpatialGeometry& g = p_.geo;
  const int64_t C = p_.k / g.kernel_size(), OH = g.out[1], OW = g.out[2];
  const int64_t KH = g.kernel[1], KW = g.kernel[2], sh = g.stride[1], sw = g.stride[2], dh = g.dilation[1];
  P_ = g.out_size();
  row_stride_ = ((OW - 1) * sw + KW) * C;
  // Output rows per band: about 48 KiB of input rows, fewer where that leaves
  // threads without a band.
  const int64_t per_row = std::max<int64_t>(1, sh * row_stride_);
  band_oh_ = std::max<int64_t>(1, std::min<int64_t>(OH, (48 << 10) / per_row));
  const int64_t want = 2 * static_cast<int64_t>(threads_);
  if (images_ * ((OH + band_oh_ - 1) / band_oh_) < want) {
    const int64_t per_image = std::min<int64_t>(OH, (want + images_ - 1) / images_);
    band_oh_ = std::max<int64_t>(1, (OH + per_image - 1) / per_image);
  }
  bands_ = (OH + band_oh_ - 1) / band_oh_;
  tasks_ = images_ * bands_;
  const int64_t band_rows = (band_oh_ - 1) * sh + (KH - 1) * dh + 1;
  // Slack: a 32-row AMX tile from the last pixel of the band's last row, and
  // the padded part of a kernel row (read against zero weights).
  const int64_t slack = 32 * sw * C + p_.row_bytes + 64;
  slot_bytes_ = RoundUp(band_rows * row_stride_ + slack, 64);
}

// Input rows ih_lo .. ih_lo + rows - 1 of image img into band: row i at
// band + i * row_stride_, column iw at (iw + pw) * C, with flip applied and
// padv where a row or column is outside the image; then the slack, zeroed.
void QFusedKernel::PadBand(const uint8_t* x, int64_t img, int64_t ih_lo, int64_t rows, uint8_t flip, uint8_t padv,
                           uint8_t* band) const {
  const SpatialGeometry& g = p_.geo;
  const int64_t C = p_.k / g.kernel_size(), H = g.in[1], W = g.in[2], pw = g.pad_begin[2];
  const int64_t stride = row_stride_, cols = stride / C;
  const int64_t left = std::min(pw, cols) * C, inside = std::max<int64_t>(0, std::min(W, cols - pw)) * C;
  const uint8_t* image = x + img * H * W * C;
  for (int64_t i = 0; i < rows; ++i) {
    uint8_t* d = band + i * stride;
    const int64_t ih = ih_lo + i;
    if (ih < 0 || ih >= H) {
      std::memset(d, padv, static_cast<size_t>(stride));
      continue;
    }
    std::memset(d, padv, static_cast<size_t>(left));
    if (flip) CopyFlip<true>(d + left, image + ih * W * C, inside, flip);
    else std::memcpy(d + left, image + ih * W * C, static_cast<size_t>(inside));
    std::memset(d + left + inside, padv, static_cast<size_t>(stride - left - inside));
  }
  std::memset(band + rows * stride, 0, static_cast<size_t>(slot_bytes_ - rows * stride));
}

// The tiles of output rows oh0 .. oh1 - 1 of image img over its band (input
// row ih_lo at band).
void QFusedKernel::BandTiles(const KernelIO& io, const Header& h, const TilePath& path, const Operands& op,
                             int64_t img, int64_t oh0, int64_t oh1, int64_t ih_lo, const uint8_t* band,
                             uint8_t shift) const {
  const SpatialGeometry& g = p_.geo;
  const int64_t C = p_.k / g.kernel_size(), OW = g.out[2], KH = g.kernel[1], KW = g.kernel[2];
  const int64_t sh = g.stride[1], sw = g.stride[2], dh = g.dilation[1], ph = g.pad_begin[1];
  const int64_t rb = p_.row_bytes, lda = sw * C, seg_stride = dh * row_stride_, run = KW * C;
  const bool amx = path.amx && rb % 64 == 0;
  const int64_t vrows = path.amx ? kQTileRows : path.rows;  // rows of the VNNI / AVX2 tiles
  const int64_t blocks = (p_.n + 15) / 16;
  const bool need_sums = h.any_wzp != 0;
  // Two sums buffers: a tile's epilogue runs after the next tile's products
  // are issued, so that the AMX unit (or the out-of-order core) overlaps the
  // products with the epilogue instead of waiting for the tile store.
  alignas(64) int32_t acc[2][kAccRows * kQTileLanes];
  int32_t xsum[2][kAccRows];
  struct Pending {
    int64_t valid = 0, c0 = 0, count = 0, out_row = -1;
  } pending;
  int cur = 0;
  auto emit_pending = [&](int buf) {
    if (pending.out_row < 0) return;
    EmitRows(io, h, op, path.shifted, acc[buf], kQTileLanes, need_sums ? xsum[buf] : nullptr, pending.valid,
             pending.c0, pending.count, pending.out_row);
  };
  for (int64_t oh = oh0; oh < oh1; ++oh) {
    const uint8_t* row = band + (oh * sh - ph - ih_lo) * row_stride_;
    const int64_t out_row = img * P_ + oh * OW;
    for (int64_t ow0 = 0; ow0 < OW;) {
      // AMX: 16 or 32 rows (those past OW discarded); else the tiles' rows.
      const int64_t rows = amx ? (OW - ow0 > 16 ? 32 : 16) : std::min<int64_t>(vrows, OW - ow0);
      const int64_t valid = std::min(rows, OW - ow0);
      const uint8_t* a = row + ow0 * lda;
      for (int64_t b0 = 0; b0 < blocks; b0 += 2) {
        const int nb = static_cast<int>(std::min<int64_t>(2, blocks - b0));
        const uint8_t* w = op.w + b0 * kp_ * 16;
        if (need_sums)
          for (int64_t r = 0; r < valid; ++r) {
            int32_t sum = 0;
            for (int64_t kh = 0; kh < KH; ++kh) {
              const uint8_t* t = a + r * lda + kh * seg_stride;
              for (int64_t j = 0; j < run; ++j) sum += t[j] ^ shift;
            }
            xsum[cur][r] = sum;
          }
        if (amx)
          QAmxTile(static_cast<int>(rows / 16), nb, kp_ / 64, a, lda, w, 64, kp_ * 16, /*a_signed=*/false,
                   acc[cur], rb / 64, seg_stride);
        else if (path.shifted)
          QMicroTileShiftedAvx2(static_cast<int>(rows), nb, kp_ / 4, a, lda, w, 64, kp_ * 16, /*lanes_x=*/false,
                                acc[cur], rb / 4, seg_stride);
        else
          QMicroTile(path.isa, static_cast<int>(rows), nb, kp_ / 4, a, lda, w, 64, kp_ * 16, /*lanes_u8=*/false,
                     acc[cur], h.pairs_fit_int16 != 0, rb / 4, seg_stride);
        emit_pending(cur ^ 1);
        const int64_t c0 = b0 * 16;
        pending = {valid, c0, std::min<int64_t>(16 * nb, p_.n - c0), out_row + ow0};
        cur ^= 1;
      }
      ow0 += rows;
    }
  }
  emit_pending(cur ^ 1);
}

void QFusedKernel::RunConvInPlace(const KernelIO& io) const {
  Header h;
  std::memcpy(&h, io.inputs[1], sizeof(h));
  const TilePath path(QGemmIsa(), h, kp_);
  const uint8_t shift = path.shifted ? 0x80 : 0;  // the shifted tiles read x - 128
  const uint8_t flip = (x_int8_ ? 0x80 : 0) ^ shift, padv = static_cast<uint8_t>(h.x_zp) ^ shift;
  const Operands op = Packed(io);
  const SpatialGeometry& g = p_.geo;
  const int64_t OH = g.out[1], KH = g.kernel[1], sh = g.stride[1], dh = g.dilation[1], ph = g.pad_begin[1];
  const uint8_t* x = static_cast<const uint8_t*>(io.inputs[0]);
  // Threads that pay for themselves (ThreadPool's rule, as RunConvNhwc).
  const double col_tiles = static_cast<double>((p_.n + 31) / 32);
  const double work = static_cast<double>(images_ * P_) / path.rows * col_tiles * path.TileCost(kp_) +
                      static_cast<double>(tasks_ * slot_bytes_);
  const int64_t slots = std::max<int64_t>(
      1, std::min<int64_t>({threads_, tasks_, static_cast<int64_t>(std::sqrt(work / 20000.0))}));
  uint8_t* scratch = static_cast<uint8_t*>(io.scratch);
  io.pool->ParallelFor(slots, 1e12, [&](int64_t s0, int64_t s1) {
    const QAmxScope amx(path.amx);
    for (int64_t s = s0; s < s1; ++s) {
      uint8_t* band = scratch + s * slot_bytes_;
      for (int64_t t = s; t < tasks_; t += slots) {
        const int64_t img = t / bands_, oh0 = (t % bands_) * band_oh_, oh1 = std::min(OH, oh0 + band_oh_);
        const int64_t ih_lo = oh0 * sh - ph, rows = (oh1 - 1 - oh0) * sh + (KH - 1) * dh + 1;
        PadBand(x, img, ih_lo, rows, flip, padv, band);
        BandTiles(io, h, path, op, img, oh0, oh1, ih_lo, band, shift);
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
  // Lanes hold x in the uint8 domain (x + 128 for int8 x), or x - 128 for the
  // shifted tiles; the column sums are of the uint8 domain.
  const TilePath path(QGemmIsa(), h, kp_);
  const uint8_t shift = path.shifted ? 0x80 : 0;
  const uint8_t flip = (x_int8_ ? 0x80 : 0) ^ shift, pad = static_cast<uint8_t>(h.x_zp) ^ shift;
  auto quads = [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q)
      QIm2ColQuad(g, p_.k, x, imgs, C, q, flip, pad, reinterpret_cast<uint32_t*>(col + q * lanes_ * 4), lanes_);
  };
  if (parallel) io.pool->ParallelFor(kp_ / 4, 4.0 * lanes_, quads);
  else quads(0, kp_ / 4);
  const bool need_sums = h.any_wzp != 0;
  if (need_sums) {
    std::fill(colsum, colsum + lanes_, 0);
    for (int64_t k = 0; k < p_.k; ++k) {
      const uint8_t* src = col + (k / 4) * lanes_ * 4 + (k % 4);
      for (int64_t l = 0; l < lanes_; ++l) colsum[l] += src[l * 4] ^ shift;
    }
  }
  const uint8_t* packed = static_cast<const uint8_t*>(io.inputs[1]);
  const uint8_t* w = packed + QPackedLayout(p_.k_packed, p_.n).weights();
  const QPackedLayout PL(p_.k_packed, p_.n);
  const int32_t* corr = reinterpret_cast<const int32_t*>(packed + PL.corr());
  const float* mult = reinterpret_cast<const float*>(packed + PL.mult());
  const float* bias = reinterpret_cast<const float*>(packed + PL.bias());
  const int32_t* wzp = reinterpret_cast<const int32_t*>(packed + PL.wzp());
  const int32_t* wsum = reinterpret_cast<const int32_t*>(packed + PL.wsum());
  const int64_t lane_tiles = (L + kQTileLanes - 1) / kQTileLanes;
  const int64_t row_tiles = (p_.n + path.rows - 1) / path.rows;
  auto tiles = [&](int64_t t0, int64_t t1) {
    const QAmxScope amx(path.amx);
    alignas(64) int32_t acc[kAccRows * kQTileLanes];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t lt = t / row_tiles, rt = t % row_tiles;
      const int64_t l0 = lt * kQTileLanes, count = std::min<int64_t>(kQTileLanes, L - l0);
      const int nb = count > 16 ? 2 : 1;
      const int64_t c0 = rt * path.rows, mr = std::min<int64_t>(path.rows, p_.n - c0);
      path.Tile(static_cast<int>(mr), nb, kp_ / 4, w + c0 * kp_, kp_, col + l0 * 4, lanes_ * 4, 64,
                /*lanes_x=*/true, acc, h);
      float f[kQTileLanes];
      for (int64_t r = 0; r < mr; ++r) {
        const int64_t c = c0 + r;
        const int32_t* a = acc + r * kQTileLanes;
        const int32_t cc = corr[c] + (path.shifted ? 128 * wsum[c] : 0), wz = wzp[c];
        const float m = mult[c], bb = bias[c];
        if (need_sums) {
          for (int64_t j = 0; j < count; ++j) f[j] = static_cast<float>(a[j] + cc - wz * colsum[l0 + j]) * m + bb;
        } else {
          for (int64_t j = 0; j < count; ++j) f[j] = static_cast<float>(a[j] + cc) * m + bb;
        }
        // Runs of lanes within one image are contiguous in the output.
        int64_t j = 0, im = l0 / P_, px = l0 % P_;
        while (j < count) {
          const int64_t run = std::min(count - j, P_ - px);
          EmitRun(io, h, f + j, run, ((img0 + im) * p_.n + c) * P_ + px);
          j += run;
          px = 0;
          ++im;
        }
      }
    }
  };
  const int64_t ntiles = lane_tiles * row_tiles;
  if (parallel) io.pool->ParallelFor(ntiles, path.TileCost(kp_), tiles);
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
