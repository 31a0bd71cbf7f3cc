// The machine's fp32 peak per core, measured: 12 independent chains of vector
// FMAs (enough to cover the FMA latency on every x86 core since Haswell) on
// the widest vectors the CPU has, timed in process CPU time (so time lost to
// other processes on a shared machine does not count). Prints GFLOP/s for one
// thread. Build and run (the flags only allow the instructions; the program
// picks the variant by cpuid):
//   g++ -O2 bench/fp32_peak.cc -o /tmp/fp32_peak && /tmp/fp32_peak
#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <cstdio>

namespace {

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

constexpr int kChains = 12;
constexpr long kIters = 20000000;

// One timed run of kChains x kIters FMAs on vectors V; returns GFLOP/s. The
// chains are named variables (an array would live in memory).
#define KAIWU_PEAK_BODY(V, SET1, FMA, LANES)                                        \
  V c0 = SET1(1.f), c1 = SET1(1.001f), c2 = SET1(1.002f), c3 = SET1(1.003f);        \
  V c4 = SET1(1.004f), c5 = SET1(1.005f), c6 = SET1(1.006f), c7 = SET1(1.007f);     \
  V c8 = SET1(1.008f), c9 = SET1(1.009f), c10 = SET1(1.01f), c11 = SET1(1.011f);    \
  const V a = SET1(0.9999f), b = SET1(1e-7f);                                       \
  const double t0 = CpuSeconds();                                                   \
  for (long it = 0; it < kIters; ++it) {                                            \
    c0 = FMA(c0, a, b); c1 = FMA(c1, a, b); c2 = FMA(c2, a, b); c3 = FMA(c3, a, b);  \
    c4 = FMA(c4, a, b); c5 = FMA(c5, a, b); c6 = FMA(c6, a, b); c7 = FMA(c7, a, b);  \
    c8 = FMA(c8, a, b); c9 = FMA(c9, a, b); c10 = FMA(c10, a, b); c11 = FMA(c11, a, b); \
    asm("" : "+x"(c0), "+x"(c1), "+x"(c2), "+x"(c3), "+x"(c4), "+x"(c5));           \
    asm("" : "+x"(c6), "+x"(c7), "+x"(c8), "+x"(c9), "+x"(c10), "+x"(c11));         \
  }                                                                                 \
  const double t = CpuSeconds() - t0;                                               \
  V s = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11;                \
  if (reinterpret_cast<float*>(&s)[0] == 12345.f) std::printf(" ");                 \
  return 2.0 * LANES * kChains * kIters / t * 1e-9;

__attribute__((target("avx2,fma"))) double Run256() {
  KAIWU_PEAK_BODY(__m256, _mm256_set1_ps, _mm256_fmadd_ps, 8)
}
__attribute__((target("avx512f"))) double Run512() {
  KAIWU_PEAK_BODY(__m512, _mm512_set1_ps, _mm512_fmadd_ps, 16)
}

// Best of 5 runs.
double Best(double (*run)()) {
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) best = std::max(best, run());
  return best;
}

}  // namespace

int main() {
  std::printf("AVX2+FMA (8 lanes): %.1f GFLOP/s per core\n", Best(Run256));
  if (__builtin_cpu_supports("avx512f"))
    std::printf("AVX-512 (16 lanes): %.1f GFLOP/s per core\n", Best(Run512));
  return 0;
}
