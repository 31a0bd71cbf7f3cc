// The channels-last conv tiles (backends/cpu/conv_nhwc.h) on the policies'
// conv shapes, one image at a time on one thread: run tiles against the tiles
// that read every row through its offset (NhwcConvProblem::run_tiles), on
// every instruction-set variant this machine has, alternating the two in
// rounds. Time is the thread's CPU time (time preempted by other processes
// does not count), median over rounds, as GFLOP/s.
// Build (after the library, e.g. build/dev):
//   g++ -O2 -std=c++17 -march=native -Icpp/src -Icpp/include bench/conv_nhwc_bench.cc \
//       build/dev/libkaiwu_core.a -lpthread -o /tmp/conv_nhwc_bench
// Run:   taskset -c 2 /tmp/conv_nhwc_bench [rounds] [min_ms per timing]
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backends/cpu/conv_nhwc.h"
#include "backends/cpu/sgemm_packed.h"
#include "backends/cpu/sgemm_packed_isa.h"

namespace {

using kaiwu::cpu::PackedIsa;

double ThreadSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Shape {
  const char* name;
  int64_t h, w, c, m, k, s;  // image as the kernel reads it (already padded), kernel, stride
  bool sum;                  // a fused residual Add
};

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  const double min_s = (argc > 2 ? std::atof(argv[2]) : 40.0) * 1e-3;
  const Shape shapes[] = {
      {"impala 3->16 3x3 64x64", 66, 66, 3, 16, 3, 1, false},
      {"impala 16->16 3x3 32x32", 34, 34, 16, 16, 3, 1, true},
      {"impala 16->32 3x3 32x32", 34, 34, 16, 32, 3, 1, false},
      {"impala 32->32 3x3 16x16", 18, 18, 32, 32, 3, 1, true},
      {"impala 32->32 3x3 8x8", 10, 10, 32, 32, 3, 1, true},
      {"atari 4->32 8x8/4 20x20", 84, 84, 4, 32, 8, 4, false},
      {"atari 32->64 4x4/2 9x9", 20, 20, 32, 64, 4, 2, false},
      {"atari 64->64 3x3 7x7", 9, 9, 64, 64, 3, 1, false},
  };
  std::vector<PackedIsa> isas;
  for (PackedIsa isa : {PackedIsa::kAvx2, PackedIsa::kAvx512})
    if (kaiwu::cpu::PackedIsaAvailable(isa)) isas.push_back(isa);
  std::printf("one image per call, 1 thread, bias + Relu; thread CPU time, median of %d rounds\n\n",
              rounds);
  std::printf("| shape | isa | offset tiles GFLOP/s | run tiles GFLOP/s | run / offset |\n");
  std::printf("|---|---|---:|---:|---:|\n");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  kaiwu::cpu::Activation relu;
  relu.kind = kaiwu::FusedActivation::Kind::kRelu;
  for (const Shape& sh : shapes) {
    const int64_t oh = (sh.h - sh.k) / sh.s + 1, ow = (sh.w - sh.k) / sh.s + 1;
    const int64_t kk = sh.k * sh.k * sh.c, pixels = oh * ow;
    std::vector<float> x(sh.h * sh.w * sh.c), w(sh.m * kk), bias(sh.m), sum(pixels * sh.m);
    std::vector<float> y(pixels * sh.m);
    for (auto* v : {&x, &w, &bias, &sum})
      for (float& f : *v) f = d(rng);
    std::vector<float> packed((sh.m + 15) / 16 * 16 * kk);
    kaiwu::cpu::PackB(/*trans_b=*/true, kk, sh.m, w.data(), packed.data());
    std::vector<int32_t> off(pixels);
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j)
        off[i * ow + j] = static_cast<int32_t>((i * sh.s * sh.w + j * sh.s) * sh.c);
    const double flop = 2.0 * static_cast<double>(kk * sh.m * pixels);
    const int64_t panels = (sh.m + 15) / 16;
    for (PackedIsa isa : isas) {
      std::vector<double> rate[2];
      for (int r = 0; r < rounds; ++r)
        for (int mode : {r % 2, 1 - r % 2}) {
          const kaiwu::cpu::NhwcConvProblem pr{x.data(), off.data(), sh.k, sh.k * sh.c,
                                               sh.w * sh.c, sh.m, packed.data(), bias.data(),
                                               &relu, y.data(), sh.sum ? sum.data() : nullptr,
                                               mode == 1};
          kaiwu::cpu::NhwcConvRows(isa, pr, 0, pixels, 0, panels);  // warm
          int64_t calls = 0;
          const double t0 = ThreadSeconds();
          double t = t0;
          while (t - t0 < min_s) {
            for (int i = 0; i < 8; ++i) kaiwu::cpu::NhwcConvRows(isa, pr, 0, pixels, 0, panels);
            calls += 8;
            t = ThreadSeconds();
          }
          rate[mode].push_back(flop * static_cast<double>(calls) / (t - t0) * 1e-9);
        }
      for (auto& v : rate) std::sort(v.begin(), v.end());
      const double off_g = rate[0][rate[0].size() / 2], run_g = rate[1][rate[1].size() / 2];
      std::printf("| %s | %s | %.1f | %.1f | %.2f |\n", sh.name, kaiwu::cpu::PackedIsaName(isa),
                  off_g, run_g, run_g / off_g);
    }
  }
  return 0;
}
