// kaiwu QLookup: y[i] = table[raw byte of x[i]] (passes/fuse_qdq_lookup.cc).
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backends/cpu/quant_gemm.h"
#include "backends/cpu/quant_kernels.h"

namespace kaiwu {
namespace cpu {
namespace {

// Bytes looked up one by one, 8 per load and store: the plain loop
// auto-vectorizes into gathers, about 3x slower on AVX2 CPUs.
void LookupScalar(const uint8_t* table, const uint8_t* x, uint8_t* y, int64_t b, int64_t e) {
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    uint64_t v, o = 0;
    std::memcpy(&v, x + i, 8);
    for (int k = 0; k < 8; ++k) o |= uint64_t{table[(v >> (8 * k)) & 0xff]} << (8 * k);
    std::memcpy(y + i, &o, 8);
  }
  for (; i < e; ++i) y[i] = table[x[i]];
}

#if defined(__x86_64__)
bool HasVbmi() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vbmi");
  }();
  return ok;
}

// AVX-512 VBMI: 64 bytes a step, the table as four registers; vpermi2b looks
// up the low 7 bits in each half of the table and bit 7 picks the half.
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) inline __m512i Lookup64(__m512i v, __m512i t0, __m512i t1,
                                                                                __m512i t2, __m512i t3) {
  const __m512i lo = _mm512_permutex2var_epi8(t0, v, t1), hi = _mm512_permutex2var_epi8(t2, v, t3);
  return _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi);
}

// AVX2: 32 bytes a step; the table as 16 rows of 16 bytes (each in both
// 128-bit halves), vpshufb looks up the low nibble in every row and the high
// nibble selects the row (one compare each). About 2 instructions a byte,
// against about 5 and a load a byte looked up one by one.
__attribute__((target("avx2"))) void LookupAvx2(const uint8_t* table, const uint8_t* x, uint8_t* y, int64_t b,
                                                int64_t e) {
  __m256i rows[16];
  for (int j = 0; j < 16; ++j)
    rows[j] = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table + 16 * j)));
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  int64_t i = b;
  for (; i + 32 <= e; i += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i lo = _mm256_and_si256(v, nibble);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
    __m256i r = _mm256_setzero_si256();
    for (int j = 0; j < 16; ++j) {
      const __m256i pick = _mm256_cmpeq_epi8(hi, _mm256_set1_epi8(static_cast<char>(j)));
      r = _mm256_or_si256(r, _mm256_and_si256(pick, _mm256_shuffle_epi8(rows[j], lo)));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), r);
  }
  LookupScalar(table, x, y, i, e);
}

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) void LookupVbmi(const uint8_t* table, const uint8_t* x,
                                                                       uint8_t* y, int64_t b, int64_t e) {
  const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64),
                t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
  int64_t i = b;
  for (; i + 64 <= e; i += 64) _mm512_storeu_si512(y + i, Lookup64(_mm512_loadu_si512(x + i), t0, t1, t2, t3));
  if (i < e) {
    const __mmask64 m = ~0ULL >> (64 - (e - i));
    _mm512_mask_storeu_epi8(y + i, m, Lookup64(_mm512_maskz_loadu_epi8(m, x + i), t0, t1, t2, t3));
  }
}
#endif

bool VbmiPath() {
#if defined(__x86_64__)
  return HasVbmi();
#else
  return false;
#endif
}

class QLookupKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override { size_ = ctx.in(0).size(); }
  void Run(const KernelIO& io) const override {
    const uint8_t* x = static_cast<const uint8_t*>(io.inputs[0]);
    uint8_t table[256];
    std::memcpy(table, io.inputs[1], 256);
    uint8_t* y = static_cast<uint8_t*>(io.outputs[0]);
    bool identity = true;  // DQ -> Q with equal parameters (Flatten between them): a copy
    for (int b = 0; b < 256; ++b) identity &= table[b] == b;
    if (identity) {
      io.pool->ParallelFor(size_, 0.25, [&](int64_t b, int64_t e) { std::memcpy(y + b, x + b, e - b); });
      return;
    }
    const QIsa isa = QGemmIsa();
    const double cost = isa == QIsa::kScalar ? 1.0 : isa == QIsa::kAvx2 || !VbmiPath() ? 0.4 : 0.1;
    io.pool->ParallelFor(size_, cost, [&](int64_t b, int64_t e) { LookupBytes(isa, table, x, y, b, e); });
  }

 private:
  int64_t size_ = 0;
};

}  // namespace

void LookupBytes(QIsa isa, const uint8_t* table, const uint8_t* x, uint8_t* y, int64_t b, int64_t e) {
#if defined(__x86_64__)
  if ((isa == QIsa::kAvx512Vnni || isa == QIsa::kAmx) && HasVbmi()) return LookupVbmi(table, x, y, b, e);
  if (isa != QIsa::kScalar) return LookupAvx2(table, x, y, b, e);
#endif
  (void)isa;
  LookupScalar(table, x, y, b, e);
}

void RegisterQuantLookupKernel(KernelRegistry& r) {
  r.Register(OpId::kQLookup, {DType::kUInt8, DType::kInt8}, &MakeKernel<QLookupKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
