// The integer GEMM micro-kernels of the fused int8 path (quant_fused.cc):
// u8 x s8 products with int32 accumulation, on the best ISA the CPU has,
// chosen at run time by cpuid (the functions carry their own target
// attributes, so the build needs no -march flag):
//   kAmx         AMX-INT8 tiles (QAmxTile) where K is a multiple of 64 and
//                16 rows are there, the AVX-512 VNNI tiles for the rest;
//   kAvx512Vnni  vpdpbusd, 16 int32 lanes per register;
//   kAvx2        vpmovzx/sx to int16 then vpmaddwd (exact: no int16 saturation,
//                unlike vpmaddubsw);
//   kScalar      plain C++.
// KAIWU_INT8_ISA=amx, =avx512vnni, =avx2 or =scalar caps the path (tests of each
// path; a path the CPU lacks gives the best it has), =best or unset: the best.
#pragma once

#include <cstdint>

namespace kaiwu {
namespace cpu {

enum class QIsa { kScalar, kAvx2, kAvx512Vnni, kAmx };

/// The path in use: the best the CPU supports, capped by KAIWU_INT8_ISA (read once).
QIsa QGemmIsa();
/// Throws kUnsupported when KAIWU_INT8_ISA holds a name that is no path (the
/// int8 kernels call it in Prepare, so that a typo is not silently ignored).
void CheckQIsaEnv();
const char* QIsaName(QIsa isa);
/// Sets the path (tests); it must be one the CPU supports.
void SetQGemmIsa(QIsa isa);
bool QIsaSupported(QIsa isa);

constexpr int kQTileRows = 6;   // rows of one micro tile (broadcast operand)
constexpr int kQTileLanes = 32; // lanes of one micro tile (two blocks of 16)

/// Segments of the broadcast operand's quads: quad q of row r is at
///   bcast + r * ldb + (q / seg_q) * seg_stride + 4 * (q % seg_q),
/// that is seg_q quads in place, then the next run seg_stride bytes on. A
/// channels-last conv reads its rows in place this way, one segment per
/// kernel row. seg_q <= 0: one segment (the quads contiguous).
struct QSegs {
  int64_t q, stride;
  QSegs(int64_t kq, int64_t seg_q, int64_t seg_stride)
      : q(seg_q > 0 ? seg_q : (kq > 0 ? kq : 1)), stride(seg_stride) {}
};

/// One tile: acc[r * 32 + j] = sum over q < kq, t < 4 of
///   bcast[r * ldb + 4 q + t] * lanes[(j / 16) * blk_stride + q * q_stride + (j % 16) * 4 + t]
/// for r < mr (<= 6) and j < 16 * nb (nb 1 or 2), the broadcast quads in
/// segments when seg_q > 0 (QSegs). With lanes_u8 the lanes are
/// uint8 and the broadcast rows int8; otherwise the reverse. pairs_fit_int16:
/// every two consecutive int8 values (k = 2i, 2i + 1) of the int8 operand
/// have |w0| + |w1| <= 128, so that u8 x s8 pair sums fit int16 (the AVX2
/// path then uses vpmaddubsw, exact under that bound).
void QMicroTile(QIsa isa, int mr, int nb, int64_t kq, const uint8_t* bcast, int64_t ldb,
                const uint8_t* lanes, int64_t q_stride, int64_t blk_stride, bool lanes_u8,
                int32_t* acc, bool pairs_fit_int16 = false, int64_t seg_q = 0, int64_t seg_stride = 0);

/// Row dots for the few channels of a Gemm's last block (QPackedLayout::dot_tail):
/// acc[r * nw + c] = sum over k < kp of X(r, k) * int8(w[c * kp + k]) for r < rows,
/// c < nw, where X(r, k) = x[r * ldx + k] as uint8, or as int8 when shifted (the
/// operands of QMicroTileShiftedAvx2: x - 128, weights without -128). kp: a
/// multiple of 4; exact like the tiles (pairs_fit_int16: see QMicroTile).
void QRowDots(QIsa isa, bool shifted, bool pairs_fit_int16, int rows, int nw, int64_t kp,
              const uint8_t* x, int64_t ldx, const uint8_t* w, int32_t* acc);

/// The AVX2 tile for full-range int8 weights that hold no -128 (QPackWeights
/// checks that): the operand layout of QMicroTile, but the activation operand
/// (lanes when lanes_x, else bcast) arrives shifted to int8 (x ^ 0x80, that is
/// x - 128) and acc[r * 32 + j] = sum (x - 128) * w; the caller adds
/// 128 * sum(w). Exact: vpmaddubsw multiplies |x - 128| <= 128 by w carrying
/// the sign of x - 128 (|w| <= 127), so a pair sums to at most 32512 < 2^15.
void QMicroTileShiftedAvx2(int mr, int nb, int64_t kq, const uint8_t* bcast, int64_t ldb,
                           const uint8_t* lanes, int64_t q_stride, int64_t blk_stride, bool lanes_x,
                           int32_t* acc, int64_t seg_q = 0, int64_t seg_stride = 0);

/// y[i] = saturate(round_half_even(x[i] * s) + zp) into [lo, hi] (x[i] / s
/// when divide), as int8 (is_signed) or uint8 bytes: QuantizeValue (quant_kernels.h)
/// 8 floats at a time, bit-identical to it (NaN gives lo). The scalar loop
/// does not vectorize (GCC keeps its selects as branches). AVX2 only.
void QuantizeBytesAvx2(const float* x, int64_t n, float s, bool divide, float zp, float lo, float hi,
                       bool is_signed, uint8_t* y);
/// QuantizeBytesAvx2 over `rows` rows of n values (x and y advance by their
/// strides); QuantizeRows takes the AVX-512 version where the CPU has
/// AVX-512 BW and VL (the same bytes: the same operations on 16 lanes).
void QuantizeRowsAvx2(const float* x, int64_t x_stride, int64_t rows, int64_t n, float s, bool divide, float zp,
                      float lo, float hi, bool is_signed, uint8_t* y, int64_t y_stride);
void QuantizeRowsAvx512(const float* x, int64_t x_stride, int64_t rows, int64_t n, float s, bool divide, float zp,
                        float lo, float hi, bool is_signed, uint8_t* y, int64_t y_stride);
void QuantizeRows(const float* x, int64_t x_stride, int64_t rows, int64_t n, float s, bool divide, float zp,
                  float lo, float hi, bool is_signed, uint8_t* y, int64_t y_stride);
/// The bytes of QuantizeValue(x[i] / s, ...) (QuantizeLinear's division) for
/// i < n, mostly without dividing: v = x * (1 / s) lies within 2 ulp of x / s,
/// so both round to the same integer unless v is within 2^-9 of a half
/// (|v| < 4096; past that every 8-bit output saturates either way); a vector
/// with such a lane divides. AVX-512 where the CPU has it, else AVX2.
void QuantizeDividedBytes(const float* x, int64_t n, float s, float zp, float lo, float hi, bool is_signed,
                          uint8_t* y);
void QuantizeDividedAvx512(const float* x, int64_t n, float s, float zp, float lo, float hi, bool is_signed,
                           uint8_t* y);
void QuantizeDividedAvx2(const float* x, int64_t n, float s, float zp, float lo, float hi, bool is_signed,
                         uint8_t* y);

constexpr int kQAmxRows = 32;   // rows of one AMX tile call (two 16-row tiles)
constexpr int kQAmxLanes = 32;  // lanes of one AMX tile call, also its acc row stride

/// The CPU has AMX-INT8 and the OS lets this process use it (Linux: granted
/// on the first call through arch_prctl).
bool QAmxSupported();

/// Holds the AMX tile configuration of QAmxTile on this thread while alive
/// (loaded on construction, released on destruction): every task that calls
/// QAmxTile opens one, since other code on the thread (another library's
/// AMX kernels) may load its own configuration between runs.
class QAmxScope {
 public:
  explicit QAmxScope(bool active);
  ~QAmxScope();
  QAmxScope(const QAmxScope&) = delete;
  QAmxScope& operator=(const QAmxScope&) = delete;

 private:
  bool active_;
};

/// One AMX step of 16 * mt rows x 16 * nt lanes (mt, nt 1 or 2) over K = 64 * ks:
///   acc[r * kQAmxLanes + j] = sum over k < 64 ks of A(r, k) * B(k, j),
///   A(r, k) = a[r * lda + k], B(k, j) = b[(j / 16) * b_blk + (k / 4) * b_q + (j % 16) * 4 + k % 4],
/// A int8 and B uint8 when a_signed, else A uint8 and B int8 (QMicroTile's
/// bcast and lanes operands). With seg_s > 0, A is read in segments of seg_s
/// steps (QSegs in steps of 64 bytes): A(r, k) = a[r * lda + (k / (64 seg_s))
/// * seg_stride + k % (64 seg_s)]. Needs a live QAmxScope on the thread; exact.
void QAmxTile(int mt, int nt, int64_t ks, const uint8_t* a, int64_t lda, const uint8_t* b, int64_t b_q,
              int64_t b_blk, bool a_signed, int32_t* acc, int64_t seg_s = 0, int64_t seg_stride = 0);

// The ISA-specific tiles (quant_gemm_x86.cc).
void QMicroTileAvx2(int mr, int nb, int64_t kq, const uint8_t* bcast, int64_t ldb,
                    const uint8_t* lanes, int64_t q_stride, int64_t blk_stride, bool lanes_u8,
                    int32_t* acc, bool pairs_fit_int16, const QSegs& seg);
void QRowDotsAvx2(bool shifted, bool pairs_fit_int16, int rows, int nw, int64_t kp, const uint8_t* x,
                  int64_t ldx, const uint8_t* w, int32_t* acc);
void QRowDotsVnni(int rows, int nw, int64_t kp, const uint8_t* x, int64_t ldx, const uint8_t* w,
                  int32_t* acc);
void QMicroTileVnni(int mr, int nb, int64_t kq, const uint8_t* bcast, int64_t ldb,
                    const uint8_t* lanes, int64_t q_stride, int64_t blk_stride, bool lanes_u8,
                    int32_t* acc, const QSegs& seg);

}  // namespace cpu
}  // namespace kaiwu
