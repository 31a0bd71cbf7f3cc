#include "backends/cpu/quant_gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/kernel.h"
#include "kaiwu/status.h"

namespace kaiwu {
namespace cpu {
namespace {

QIsa BestIsa() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vnni"))
    return QAmxSupported() ? QIsa::kAmx : QIsa::kAvx512Vnni;  // AMX leaves its tails to VNNI
  if (__builtin_cpu_supports("avx2")) return QIsa::kAvx2;
#endif
  return QIsa::kScalar;
}

// The best path the CPU has, or the one KAIWU_INT8_ISA names when the CPU has
// it ("best" or unset: the best; a path above the best, or a name that is none
// of these, leaves the best: CheckQIsaEnv() names it for the kernels to refuse).
const char* kIsaNames[] = {"scalar", "avx2", "avx512vnni", "amx"};

const char*& BadEnvSlot() {
  static const char* bad = nullptr;
  return bad;
}

QIsa InitialIsa() {
  const QIsa best = BestIsa();
  const char* env = std::getenv("KAIWU_INT8_ISA");
  if (!env || !*env || std::strcmp(env, "best") == 0) return best;
  for (int i = 0; i < 4; ++i)
    if (std::strcmp(env, kIsaNames[i]) == 0) return std::min(static_cast<QIsa>(i), best);
  BadEnvSlot() = env;
  return best;
}

std::atomic<int>& IsaSlot() {
  static std::atomic<int> slot{static_cast<int>(InitialIsa())};
  return slot;
}

void TileScalar(int mr, int nb, int64_t kq, const uint8_t* bcast, int64_t ldb,
                const uint8_t* lanes, int64_t q_stride, int64_t blk_stride, bool lanes_u8,
                int32_t* acc, const QSegs& seg) {
  for (int r = 0; r < mr; ++r)
    for (int j = 0; j < 16 * nb; ++j) {
      const uint8_t* l = lanes + (j / 16) * blk_stride + (j % 16) * 4;
      int32_t s = 0;
      for (int64_t q = 0; q < kq; ++q) {
        const uint8_t* b = bcast + r * ldb + (q / seg.q) * seg.stride + 4 * (q % seg.q);
        for (int t = 0; t < 4; ++t) {
          const int32_t lv = lanes_u8 ? int32_t(l[q * q_stride + t]) : int32_t(int8_t(l[q * q_stride + t]));
          const int32_t bv = lanes_u8 ? int32_t(int8_t(b[t])) : int32_t(b[t]);
          s += lv * bv;
        }
      }
      acc[r * kQTileLanes + j] = s;
    }
}

void RowDotsScalar(bool shifted, int rows, int nw, int64_t kp, const uint8_t* x, int64_t ldx,
                   const uint8_t* w, int32_t* acc) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < nw; ++c) {
      const uint8_t* xr = x + r * ldx;
      const int8_t* wc = reinterpret_cast<const int8_t*>(w + c * kp);
      int32_t s = 0;
      for (int64_t k = 0; k < kp; ++k) s += (shifted ? int32_t(int8_t(xr[k])) : int32_t(xr[k])) * wc[k];
      acc[r * nw + c] = s;
    }
}

}  // namespace

void QRowDots(QIsa isa, bool shifted, bool pairs_fit_int16, int rows, int nw, int64_t kp,
              const uint8_t* x, int64_t ldx, const uint8_t* w, int32_t* acc) {
#if defined(__x86_64__) || defined(__i386__)
  if (isa >= QIsa::kAvx512Vnni && !shifted) return QRowDotsVnni(rows, nw, kp, x, ldx, w, acc);
  if (isa != QIsa::kScalar) return QRowDotsAvx2(shifted, pairs_fit_int16, rows, nw, kp, x, ldx, w, acc);
#endif
  RowDotsScalar(shifted, rows, nw, kp, x, ldx, w, acc);
}

void CheckQIsaEnv() {
  IsaSlot();
  const char* bad = BadEnvSlot();
  KAIWU_CHECK(!bad, StatusCode::kUnsupported, "KAIWU_INT8_ISA=", bad,
              " names no int8 kernel path (scalar, avx2, avx512vnni, amx or best)");
}

bool QIsaSupported(QIsa isa) { return static_cast<int>(isa) <= static_cast<int>(BestIsa()); }

QIsa QGemmIsa() { return static_cast<QIsa>(IsaSlot().load(std::memory_order_relaxed)); }

void SetQGemmIsa(QIsa isa) {
  KAIWU_CHECK(QIsaSupported(isa), StatusCode::kUnsupported, "this CPU cannot run the int8 path ",
              QIsaName(isa));
  IsaSlot().store(static_cast<int>(isa));
}

}  // namespace cpu

int CpuInt8ConvRowAlign() { return cpu::QGemmIsa() == cpu::QIsa::kAmx ? 64 : 4; }

namespace cpu {

const char* QIsaName(QIsa isa) {
  switch (isa) {
    case QIsa::kAmx: return "amx";
    case QIsa::kAvx512Vnni: return "avx512vnni";
    case QIsa::kAvx2: return "avx2";
    default: return "scalar";
  }
}

void QuantizeRows(const float* x, int64_t x_stride, int64_t rows, int64_t n, float s, bool divide, float zp,
                  float lo, float hi, bool is_signed, uint8_t* y, int64_t y_stride) {
#if defined(__x86_64__)
  static const bool avx512 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
  }();
  if (avx512) return QuantizeRowsAvx512(x, x_stride, rows, n, s, divide, zp, lo, hi, is_signed, y, y_stride);
#endif
  QuantizeRowsAvx2(x, x_stride, rows, n, s, divide, zp, lo, hi, is_signed, y, y_stride);
}

void QuantizeDividedBytes(const float* x, int64_t n, float s, float zp, float lo, float hi, bool is_signed,
                          uint8_t* y) {
#if defined(__x86_64__)
  static const bool avx512 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
  }();
  if (avx512) return QuantizeDividedAvx512(x, n, s, zp, lo, hi, is_signed, y);
#endif
  QuantizeDividedAvx2(x, n, s, zp, lo, hi, is_signed, y);
}

void QMicroTile(QIsa isa, int mr, int nb, int64_t kq, const uint8_t* bcast, int64_t ldb,
                const uint8_t* lanes, int64_t q_stride, int64_t blk_stride, bool lanes_u8,
                int32_t* acc, bool pairs_fit_int16, int64_t seg_q, int64_t seg_stride) {
  const QSegs seg(kq, seg_q, seg_stride);
#if defined(__x86_64__) || defined(__i386__)
  if (isa >= QIsa::kAvx512Vnni)  // AMX's rows and K tails
    return QMicroTileVnni(mr, nb, kq, bcast, ldb, lanes, q_stride, blk_stride, lanes_u8, acc, seg);
  if (isa == QIsa::kAvx2)
    return QMicroTileAvx2(mr, nb, kq, bcast, ldb, lanes, q_stride, blk_stride, lanes_u8, acc,
                          pairs_fit_int16, seg);
#endif
  TileScalar(mr, nb, kq, bcast, ldb, lanes, q_stride, blk_stride, lanes_u8, acc, seg);
}

}  // namespace cpu
}  // namespace kaiwu
