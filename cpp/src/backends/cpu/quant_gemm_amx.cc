// The AMX tiles of quant_gemm.h (Intel AMX-INT8: tdpbusd / tdpbsud on 16 x 64
// byte tiles, int32 accumulation), compiled through target attributes like the
// other x86 tiles. The operands are read where the AVX-512 VNNI tiles read
// them: a tile of A is 16 rows of 64 bytes at a row stride, a tile of B is 16
// quads (64 k) of 16 lanes, which is the packed weights' and the im2col
// lanes' layout already.
#include "backends/cpu/quant_gemm.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cpuid.h>

namespace kaiwu {
namespace cpu {
namespace {

// Tiles 0-3: C (row block m, lane block n at 2 m + n); 4-5: A; 6-7: B.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

__attribute__((target("amx-tile"))) void LoadConfig() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
}

__attribute__((target("amx-tile"))) void ReleaseTiles() { _tile_release(); }

template <bool kASigned, int MT, int NT>
__attribute__((target("amx-tile,amx-int8"))) void TileAmx(int64_t ks, const uint8_t* a, int64_t lda,
                                                        const uint8_t* b, int64_t b_q, int64_t b_blk,
                                                        int32_t* acc, int64_t seg_s, int64_t seg_stride) {
  _tile_zero(0);
  if (NT > 1) _tile_zero(1);
  if (MT > 1) _tile_zero(2);
  if (MT > 1 && NT > 1) _tile_zero(3);
  const int64_t a16 = 16 * lda, bstep = 16 * b_q;
  for (int64_t s = 0, j = 0; s < ks; ++s) {
    const uint8_t* as = a + j * 64;  // step s of A: step j of the current segment
    if (++j == seg_s) {
      j = 0;
      a += seg_stride;
    }
    _tile_loadd(4, as, lda);
    _tile_loadd(6, b + s * bstep, b_q);
    if (NT > 1) _tile_loadd(7, b + b_blk + s * bstep, b_q);
    if (MT > 1) _tile_loadd(5, as + a16, lda);
    if (kASigned) {
      _tile_dpbsud(0, 4, 6);
      if (NT > 1) _tile_dpbsud(1, 4, 7);
      if (MT > 1) _tile_dpbsud(2, 5, 6);
      if (MT > 1 && NT > 1) _tile_dpbsud(3, 5, 7);
    } else {
      _tile_dpbusd(0, 4, 6);
      if (NT > 1) _tile_dpbusd(1, 4, 7);
      if (MT > 1) _tile_dpbusd(2, 5, 6);
      if (MT > 1 && NT > 1) _tile_dpbusd(3, 5, 7);
    }
  }
  constexpr int64_t ld = kQAmxLanes * 4;  // bytes per acc row
  _tile_stored(0, acc, ld);
  if (NT > 1) _tile_stored(1, acc + 16, ld);
  if (MT > 1) _tile_stored(2, acc + 16 * kQAmxLanes, ld);
  if (MT > 1 && NT > 1) _tile_stored(3, acc + 16 * kQAmxLanes + 16, ld);
}

template <bool kASigned>
void Dispatch(int mt, int nt, int64_t ks, const uint8_t* a, int64_t lda, const uint8_t* b, int64_t b_q,
              int64_t b_blk, int32_t* acc, int64_t seg_s, int64_t seg_stride) {
  if (mt == 2) {
    if (nt == 2) return TileAmx<kASigned, 2, 2>(ks, a, lda, b, b_q, b_blk, acc, seg_s, seg_stride);
    return TileAmx<kASigned, 2, 1>(ks, a, lda, b, b_q, b_blk, acc, seg_s, seg_stride);
  }
  if (nt == 2) return TileAmx<kASigned, 1, 2>(ks, a, lda, b, b_q, b_blk, acc, seg_s, seg_stride);
  TileAmx<kASigned, 1, 1>(ks, a, lda, b, b_q, b_blk, acc, seg_s, seg_stride);
}

}  // namespace

bool QAmxSupported() {
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool tile = (d >> 24) & 1, int8 = (d >> 25) & 1;
    if (!tile || !int8) return false;
    // Linux hands out the tile data state only on request (arch_prctl
    // ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA), once for the process.
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

QAmxScope::QAmxScope(bool active) : active_(active) {
  if (active_) LoadConfig();
}

QAmxScope::~QAmxScope() {
  if (active_) ReleaseTiles();
}

void QAmxTile(int mt, int nt, int64_t ks, const uint8_t* a, int64_t lda, const uint8_t* b, int64_t b_q,
              int64_t b_blk, bool a_signed, int32_t* acc, int64_t seg_s, int64_t seg_stride) {
  // One segment: steps contiguous (the segment never ends before ks).
  if (seg_s <= 0) seg_s = ks + 1;
  if (a_signed) Dispatch<true>(mt, nt, ks, a, lda, b, b_q, b_blk, acc, seg_s, seg_stride);
  else Dispatch<false>(mt, nt, ks, a, lda, b, b_q, b_blk, acc, seg_s, seg_stride);
}

}  // namespace cpu
}  // namespace kaiwu

#else

namespace kaiwu {
namespace cpu {

bool QAmxSupported() { return false; }
QAmxScope::QAmxScope(bool active) : active_(active) {}
QAmxScope::~QAmxScope() {}
void QAmxTile(int, int, int64_t, const uint8_t*, int64_t, const uint8_t*, int64_t, int64_t, bool, int32_t*, int64_t,
              int64_t) {}

}  // namespace cpu
}  // namespace kaiwu

#endif
