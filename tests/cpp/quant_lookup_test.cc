// QLookup's byte table loop (backends/cpu/quant_lookup.cc) on every int8 path
// the CPU has (scalar, AVX2 nibble rows, AVX-512 VBMI), against table[x] at
// sizes around each path's step (8, 32, 64 bytes) and at unaligned offsets;
// bytes outside [b, e) stay as they were.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backends/cpu/quant_gemm.h"
#include "backends/cpu/quant_kernels.h"

namespace kaiwu {
namespace cpu {
namespace {

TEST(QuantLookup, EveryPathEqualsTheTableAtOddSizesAndOffsets) {
  std::mt19937 rng(20261127);
  std::uniform_int_distribution<int> byte(0, 255);
  int paths = 0;
  for (QIsa isa : {QIsa::kScalar, QIsa::kAvx2, QIsa::kAvx512Vnni}) {
    if (!QIsaSupported(isa)) continue;
    ++paths;
    for (int64_t n : {0, 1, 7, 8, 9, 31, 32, 33, 63, 64, 65, 100, 257, 1000}) {
      for (int64_t b : {0, 1, 5}) {
        uint8_t table[256];
        for (auto& t : table) t = static_cast<uint8_t>(byte(rng));
        const int64_t total = b + n + 7;
        std::vector<uint8_t> x(total), y(total, 0xa5);
        for (auto& v : x) v = static_cast<uint8_t>(byte(rng));
        for (int64_t i = 0; i < 256 && b + i < b + n; ++i) x[b + i] = static_cast<uint8_t>(i);  // every byte value
        LookupBytes(isa, table, x.data(), y.data(), b, b + n);
        for (int64_t i = 0; i < total; ++i) {
          const uint8_t want = i >= b && i < b + n ? table[x[i]] : 0xa5;
          ASSERT_EQ(y[i], want) << QIsaName(isa) << " n " << n << " b " << b << " at " << i;
        }
      }
    }
  }
  EXPECT_GE(paths, 1);
}

}  // namespace
}  // namespace cpu
}  // namespace kaiwu
