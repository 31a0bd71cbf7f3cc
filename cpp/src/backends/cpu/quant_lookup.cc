// kaiwu QLookup: y[i] = table[raw byte of x[i]] (passes/fuse_qdq_lookup.cc).
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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
#if defined(__x86_64__)
    if (HasVbmi()) {
      io.pool->ParallelFor(size_, 0.1, [&](int64_t b, int64_t e) { LookupVbmi(table, x, y, b, e); });
      return;
    }
#endif
    io.pool->ParallelFor(size_, 1.0, [&](int64_t b, int64_t e) { LookupScalar(table, x, y, b, e); });
  }

 private:
  int64_t size_ = 0;
};

}  // namespace

void RegisterQuantLookupKernel(KernelRegistry& r) {
  r.Register(OpId::kQLookup, {DType::kUInt8, DType::kInt8}, &MakeKernel<QLookupKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
