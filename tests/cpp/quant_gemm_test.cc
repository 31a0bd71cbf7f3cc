// The int8 micro tiles (backends/cpu/quant_gemm.h) on every ISA path the CPU
// has, against an int64 reference at odd sizes, with extreme operands (255 x
// -128 everywhere: the int16 pair sums that vpmaddubsw would saturate) and,
// for the vpmaddubsw path, int8 operands that satisfy its pair bound.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/quant_gemm.h"
#include "backends/cpu/quant_kernels.h"

namespace kaiwu {
namespace cpu {
namespace {

struct Case {
  int mr, nb;
  int64_t kq;
  bool lanes_u8;
};

void Check(QIsa isa, const Case& c, bool extreme, bool pairs_fit, std::mt19937& rng) {
  const int64_t blk = c.kq * 64 + 8, qs = 64;  // lanes: [block][q][16][4], a gap between blocks
  const int64_t ldb = c.kq * 4 + 5;
  std::vector<uint8_t> lanes(2 * blk), bcast(6 * ldb);
  std::uniform_int_distribution<int> u8(0, 255), s8(-128, 127), s7(-64, 64);
  auto fill = [&](std::vector<uint8_t>& v, bool is_u8) {
    for (auto& b : v) {
      int x = is_u8 ? u8(rng) : (pairs_fit ? s7(rng) : s8(rng));
      if (extreme) x = is_u8 ? 255 : -128;
      b = static_cast<uint8_t>(x);
    }
  };
  fill(lanes, c.lanes_u8);
  fill(bcast, !c.lanes_u8);
  int32_t acc[kQTileRows * kQTileLanes];
  QMicroTile(isa, c.mr, c.nb, c.kq, bcast.data(), ldb, lanes.data(), qs, blk, c.lanes_u8, acc, pairs_fit);
  for (int r = 0; r < c.mr; ++r)
    for (int j = 0; j < 16 * c.nb; ++j) {
      int64_t want = 0;
      for (int64_t q = 0; q < c.kq; ++q)
        for (int t = 0; t < 4; ++t) {
          const uint8_t lv = lanes[(j / 16) * blk + q * qs + (j % 16) * 4 + t];
          const uint8_t bv = bcast[r * ldb + 4 * q + t];
          const int64_t l = c.lanes_u8 ? int64_t(lv) : int64_t(int8_t(lv));
          const int64_t b = c.lanes_u8 ? int64_t(int8_t(bv)) : int64_t(bv);
          want += l * b;
        }
      ASSERT_EQ(acc[r * kQTileLanes + j], want)
          << QIsaName(isa) << " mr=" << c.mr << " nb=" << c.nb << " kq=" << c.kq << " r=" << r << " j=" << j
          << " extreme=" << extreme << " pairs_fit=" << pairs_fit;
    }
}

TEST(QuantGemm, MicroTilesMatchInt64ReferenceOnEveryIsa) {
  std::mt19937 rng(7);
  for (QIsa isa : {QIsa::kScalar, QIsa::kAvx2, QIsa::kAvx512Vnni, QIsa::kAmx}) {
    if (!QIsaSupported(isa)) continue;
    for (Case c : {Case{1, 1, 1, true}, Case{6, 2, 37, true}, Case{5, 1, 64, false}, Case{3, 2, 13, false},
                   Case{2, 2, 200, true}, Case{4, 1, 7, true}})
      for (bool extreme : {false, true})
        for (bool pairs_fit : {false, true}) {
          if (extreme && pairs_fit) continue;  // -128 pairs do not fit the bound
          Check(isa, c, extreme, pairs_fit, rng);
        }
  }
}

// QAmxTile (AMX-INT8) against an int64 reference: every shape (16 or 32 rows,
// 16 or 32 lanes), both operand signs, K of 1, 3 and 49 steps of 64 (3136: a
// Nature CNN's fc), strides with gaps (rows of A, quads and lane blocks of B),
// random and extreme operands (255 x -128 everywhere).
TEST(QuantGemm, AmxTilesMatchInt64Reference) {
  if (!QAmxSupported()) GTEST_SKIP() << "no AMX-INT8 (or the OS did not grant it)";
  std::mt19937 rng(17);
  std::uniform_int_distribution<int> u8(0, 255), s8(-128, 127);
  for (int64_t ks : {1, 3, 49})
    for (int mt : {1, 2})
      for (int nt : {1, 2})
        for (bool a_signed : {false, true})
          for (bool extreme : {false, true}) {
            const int64_t lda = 64 * ks + 8, b_q = 64 + 16, b_blk = 16 * ks * b_q + 24;
            std::vector<uint8_t> a(32 * lda), b(2 * b_blk);
            for (auto& v : a) v = static_cast<uint8_t>(extreme ? (a_signed ? -128 : 255) : (a_signed ? s8(rng) : u8(rng)));
            for (auto& v : b) v = static_cast<uint8_t>(extreme ? (a_signed ? 255 : -128) : (a_signed ? u8(rng) : s8(rng)));
            std::vector<int32_t> acc(kQAmxRows * kQAmxLanes, -7);
            {
              const QAmxScope scope(true);
              QAmxTile(mt, nt, ks, a.data(), lda, b.data(), b_q, b_blk, a_signed, acc.data());
            }
            for (int r = 0; r < 16 * mt; ++r)
              for (int j = 0; j < 16 * nt; ++j) {
                int64_t want = 0;
                for (int64_t k = 0; k < 64 * ks; ++k) {
                  const uint8_t av = a[r * lda + k], bv = b[(j / 16) * b_blk + (k / 4) * b_q + (j % 16) * 4 + k % 4];
                  want += (a_signed ? int64_t(int8_t(av)) : int64_t(av)) * (a_signed ? int64_t(bv) : int64_t(int8_t(bv)));
                }
                ASSERT_EQ(acc[r * kQAmxLanes + j], want) << "ks=" << ks << " mt=" << mt << " nt=" << nt
                                                         << " a_signed=" << a_signed << " extreme=" << extreme
                                                         << " r=" << r << " j=" << j;
              }
            // Outside the shape: untouched.
            for (int r = 0; r < kQAmxRows; ++r)
              for (int j = 0; j < kQAmxLanes; ++j)
                if (r >= 16 * mt || j >= 16 * nt) ASSERT_EQ(acc[r * kQAmxLanes + j], -7) << r << " " << j;
          }
}

// QMicroTileShiftedAvx2: activations stored as x ^ 0x80 (x - 128 as int8),
// weights in [-127, 127]; extreme: x in {0, 255} against w = +-127, the
// largest int16 pair sums the tile forms (2 * 128 * 127).
void CheckShifted(const Case& c, bool extreme, std::mt19937& rng) {
  const int64_t blk = c.kq * 64 + 8, qs = 64;
  const int64_t ldb = c.kq * 4 + 5;
  std::vector<uint8_t> lanes(2 * blk), bcast(6 * ldb);
  std::uniform_int_distribution<int> u8(0, 255), s8(-127, 127), bit(0, 1);
  auto fill = [&](std::vector<uint8_t>& v, bool is_x) {
    for (auto& b : v) {
      int x = is_x ? u8(rng) : s8(rng);
      if (extreme) x = is_x ? 255 * bit(rng) : (bit(rng) ? 127 : -127);
      b = static_cast<uint8_t>(is_x ? x ^ 0x80 : x);
    }
  };
  fill(lanes, c.lanes_u8);
  fill(bcast, !c.lanes_u8);
  int32_t acc[kQTileRows * kQTileLanes];
  QMicroTileShiftedAvx2(c.mr, c.nb, c.kq, bcast.data(), ldb, lanes.data(), qs, blk, c.lanes_u8, acc);
  for (int r = 0; r < c.mr; ++r)
    for (int j = 0; j < 16 * c.nb; ++j) {
      int64_t want = 0;
      for (int64_t q = 0; q < c.kq; ++q)
        for (int t = 0; t < 4; ++t) {
          const int64_t lv = int8_t(lanes[(j / 16) * blk + q * qs + (j % 16) * 4 + t]);
          const int64_t bv = int8_t(bcast[r * ldb + 4 * q + t]);
          want += lv * bv;  // (x - 128) * w: both stored as int8
        }
      ASSERT_EQ(acc[r * kQTileLanes + j], want) << "mr=" << c.mr << " nb=" << c.nb << " kq=" << c.kq
                                                << " lanes_x=" << c.lanes_u8 << " r=" << r << " j=" << j
                                                << " extreme=" << extreme;
    }
}

TEST(QuantGemm, ShiftedAvx2TileMatchesInt64Reference) {
  if (!QIsaSupported(QIsa::kAvx2)) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(11);
  for (int mr = 1; mr <= 6; ++mr)
    for (Case c : {Case{mr, 1, 1, true}, Case{mr, 2, 37, true}, Case{mr, 1, 64, false}, Case{mr, 2, 13, false},
                   Case{mr, 2, 200, true}})
      for (bool extreme : {false, true}) CheckShifted(c, extreme, rng);
}

// QRowDots (the channels of a Gemm's last partial block) on every path, each
// operand mode (uint8 x with full-range or pair-bound weights; x - 128 with
// weights in [-127, 127]), kp with and without a tail of the 32 / 64-byte steps;
// extreme: x 255 (shifted: x - 128 = -128) against w -128 (shifted: +-127).
TEST(QuantGemm, RowDotsMatchInt64ReferenceOnEveryIsa) {
  std::mt19937 rng(13);
  std::uniform_int_distribution<int> u8(0, 255), s8(-128, 127), s7(-64, 64), s127(-127, 127), bit(0, 1);
  for (QIsa isa : {QIsa::kScalar, QIsa::kAvx2, QIsa::kAvx512Vnni, QIsa::kAmx}) {
    if (!QIsaSupported(isa)) continue;
    for (int mode = 0; mode < 3; ++mode) {  // 0 full range, 1 pairs fit int16, 2 shifted
      if (mode == 2 && isa >= QIsa::kAvx512Vnni) continue;  // the shifted operands are AVX2's
      for (int64_t kp : {4, 32, 36, 64, 100, 256, 3136})
        for (bool extreme : {false, true}) {
          if (extreme && mode == 1) continue;
          const int rows = 5, nw = 3;
          const int64_t ldx = kp + 7;
          std::vector<uint8_t> x(rows * ldx), w(nw * kp);
          for (auto& b : x) b = static_cast<uint8_t>(extreme ? 255 : u8(rng));
          for (auto& b : w) {
            int v = mode == 1 ? s7(rng) : mode == 2 ? s127(rng) : s8(rng);
            if (extreme) v = mode == 2 ? (bit(rng) ? 127 : -127) : -128;
            b = static_cast<uint8_t>(v);
          }
          std::vector<int32_t> acc(rows * nw, -1);
          QRowDots(isa, mode == 2, mode == 1, rows, nw, kp, x.data(), ldx, w.data(), acc.data());
          for (int r = 0; r < rows; ++r)
            for (int c = 0; c < nw; ++c) {
              int64_t want = 0;
              for (int64_t k = 0; k < kp; ++k) {
                const uint8_t xv = x[r * ldx + k];
                want += (mode == 2 ? int64_t(int8_t(xv)) : int64_t(xv)) * int64_t(int8_t(w[c * kp + k]));
              }
              ASSERT_EQ(acc[r * nw + c], want) << QIsaName(isa) << " mode=" << mode << " kp=" << kp << " r=" << r
                                               << " c=" << c << " extreme=" << extreme;
            }
        }
    }
  }
}

// QuantizeBytesAvx2 bit-identical to QuantizeValue: ties (round half to
// even), saturation, +-inf, NaN (gives lo), -0, lengths with tails of 1..7.
TEST(QuantGemm, QuantizeBytesAvx2MatchesScalar) {
  if (!QIsaSupported(QIsa::kAvx2)) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-300.f, 300.f);
  std::vector<float> x;
  for (int i = -600; i <= 600; ++i) x.push_back(0.5f * i);  // every tie
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {inf, -inf, std::nanf(""), -0.f, 1e30f, -1e30f, 4194305.f, -8388609.f}) x.push_back(v);
  for (int i = 0; i < 997; ++i) x.push_back(u(rng));
  for (bool is_signed : {false, true})
    for (bool divide : {false, true})
      for (float s : {1.f, 0.37f, 3.f})
        for (size_t n : {x.size(), size_t{7}, size_t{13}}) {
          const float lo = is_signed ? -128.f : 0.f, hi = is_signed ? 127.f : 255.f;
          const float zp = is_signed ? -3.f : 17.f;
          std::vector<uint8_t> y(n);
          QuantizeBytesAvx2(x.data(), static_cast<int64_t>(n), s, divide, zp, lo, hi, is_signed, y.data());
          for (size_t i = 0; i < n; ++i) {
            const int32_t want = static_cast<int32_t>(QuantizeValue(divide ? x[i] / s : x[i] * s, zp, lo, hi));
            const int32_t got = is_signed ? int32_t(int8_t(y[i])) : int32_t(y[i]);
            ASSERT_EQ(got, want) << "x=" << x[i] << " s=" << s << " divide=" << divide << " signed=" << is_signed;
          }
          // The row forms: three rows of n / 3 values at strides with gaps, AVX2 and
          // (where the CPU has it) AVX-512, the same bytes as the single-row call.
          const int64_t w = static_cast<int64_t>(n) / 3, xs = w + 5, ys = w + 3;
          if (w == 0) continue;
          std::vector<uint8_t> rows_avx2(3 * ys, 0xEE), rows_avx512(3 * ys, 0xEE);
          std::vector<float> xr(3 * xs, 0.f);
          for (int r = 0; r < 3; ++r)
            for (int64_t i = 0; i < w; ++i) xr[r * xs + i] = x[r * w + i];
          QuantizeRowsAvx2(xr.data(), xs, 3, w, s, divide, zp, lo, hi, is_signed, rows_avx2.data(), ys);
          bool avx512 = false;
#if defined(__x86_64__)
          __builtin_cpu_init();
          avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl");
#endif
          if (avx512) QuantizeRowsAvx512(xr.data(), xs, 3, w, s, divide, zp, lo, hi, is_signed, rows_avx512.data(), ys);
          for (int r = 0; r < 3; ++r)
            for (int64_t i = 0; i < ys; ++i) {
              const uint8_t want = i < w ? y[r * w + i] : 0xEE;  // the gaps untouched
              ASSERT_EQ(rows_avx2[r * ys + i], want) << "avx2 rows r=" << r << " i=" << i << " n=" << n;
              if (avx512) ASSERT_EQ(rows_avx512[r * ys + i], want) << "avx512 rows r=" << r << " i=" << i << " n=" << n;
            }
        }
}

TEST(QuantGemm, IsaSelection) {
  EXPECT_TRUE(QIsaSupported(QIsa::kScalar));
  EXPECT_TRUE(QIsaSupported(QGemmIsa()));
  const QIsa before = QGemmIsa();
  SetQGemmIsa(QIsa::kScalar);
  EXPECT_EQ(QGemmIsa(), QIsa::kScalar);
  SetQGemmIsa(before);
}

}  // namespace
}  // namespace cpu
}  // namespace kaiwu
