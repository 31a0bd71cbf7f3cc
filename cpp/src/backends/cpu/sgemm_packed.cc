#include "backends/cpu/sgemm_packed.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/sgemm_packed_isa.h"

namespace kaiwu {
namespace cpu {

void PackB(bool trans_b, int64_t k, int64_t n, const float* b, float* packed) {
  const int64_t panels = (n + kPackedPanel - 1) / kPackedPanel;
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t q = 0; q < k; ++q)
      for (int64_t j = 0; j < kPackedPanel; ++j) {
        const int64_t col = p * kPackedPanel + j;
        float v = 0.f;
        if (col < n) v = trans_b ? b[col * k + q] : b[q * n + col];
        packed[(p * k + q) * kPackedPanel + j] = v;
      }
}

namespace {

bool CpuHas(PackedIsa isa) {
#ifdef KAIWU_PACKED_X86
  switch (isa) {
    case PackedIsa::kAvx512: return __builtin_cpu_supports("avx512f");
    case PackedIsa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    default: return true;
  }
#else
  return isa == PackedIsa::kScalar;
#endif
}

// Portable variant: the same blocking of k per element as the SIMD ones.
void BlockScalar(const PackedProblem& p, int64_t r0, int64_t r1, int64_t q0, int64_t q1) {
  for (int64_t i = r0; i < r1; ++i)
    for (int64_t panel = q0; panel < q1; ++panel) {
      const int64_t col0 = panel * kPackedPanel, cols = std::min(kPackedPanel, p.n - col0);
      float* crow = p.c + i * p.ldc + col0;
      for (int64_t j = 0; j < cols; ++j) {
        float s = 0.f;
        for (int64_t q = 0; q < p.k; ++q)
          s += p.a[i * p.lda + q] * p.packed[(panel * p.k + q) * kPackedPanel + j];
        crow[j] = s + (p.bias ? p.bias[col0 + j] : 0.f);
      }
      if (p.act->active()) p.act->Apply(crow, cols);
    }
}

}  // namespace

bool PackedIsaAvailable(PackedIsa isa) { return CpuHas(isa); }

PackedIsa DetectPackedIsa() {
  const char* cap = std::getenv("KAIWU_CPU_ISA");
  const bool allow512 = cap == nullptr || cap[0] == '\0' || std::strcmp(cap, "avx512") == 0;
  const bool allow2 = allow512 || std::strcmp(cap, "avx2") == 0;
  if (allow512 && CpuHas(PackedIsa::kAvx512)) return PackedIsa::kAvx512;
  if (allow2 && CpuHas(PackedIsa::kAvx2)) return PackedIsa::kAvx2;
  return PackedIsa::kScalar;
}

PackedIsa ActivePackedIsa() {
  static const PackedIsa isa = DetectPackedIsa();
  return isa;
}

const char* PackedIsaName(PackedIsa isa) {
  switch (isa) {
    case PackedIsa::kAvx512: return "avx512";
    case PackedIsa::kAvx2: return "avx2";
    default: return "scalar";
  }
}

void PackedBlock(PackedIsa isa, const PackedProblem& p, int64_t r0, int64_t r1, int64_t q0,
                 int64_t q1) {
  if (p.k == 0) {
    for (int64_t i = r0; i < r1; ++i) {
      float* crow = p.c + i * p.ldc;
      const int64_t j0 = q0 * kPackedPanel, j1 = std::min(p.n, q1 * kPackedPanel);
      for (int64_t j = j0; j < j1; ++j) crow[j] = p.bias ? p.bias[j] : 0.f;
      if (p.act->active()) p.act->Apply(crow + j0, j1 - j0);
    }
    return;
  }
  switch (isa) {
#ifdef KAIWU_PACKED_X86
    case PackedIsa::kAvx512: isa_avx512::Block(p, r0, r1, q0, q1); return;
    case PackedIsa::kAvx2: isa_avx2::Block(p, r0, r1, q0, q1); return;
#endif
    default: BlockScalar(p, r0, r1, q0, q1); return;
  }
}

int64_t PackedTileRows(PackedIsa isa) {
  switch (isa) {
#ifdef KAIWU_PACKED_X86
    case PackedIsa::kAvx512: return isa_avx512::TileRows();
    case PackedIsa::kAvx2: return isa_avx2::TileRows();
#endif
    default: return 1;
  }
}

int64_t PackedTilePanels(PackedIsa isa, int64_t rows) {
  switch (isa) {
#ifdef KAIWU_PACKED_X86
    case PackedIsa::kAvx512: return isa_avx512::TilePanels(rows);
    case PackedIsa::kAvx2: return isa_avx2::TilePanels(rows);
#endif
    default: return 1;
  }
}

namespace {
// ThreadPool cost units (~0.075 ns) per float of packed B a product reads:
// a core streams ~20-30 GB/s from the last-level cache.
constexpr double kStreamCostPerFloat = 2.0;
// Floats of B below which it stays in one core's L2 between runs (1 MiB).
constexpr double kL2Floats = 262144.0;
}  // namespace

double PackedFlopsPerCostUnit(PackedIsa isa) {
  switch (isa) {
    case PackedIsa::kAvx512: return 10.0;
    case PackedIsa::kAvx2: return 5.0;
    default: return 1.0;
  }
}

namespace {
// What the parallel loops need, behind one reference.
struct Job {
  PackedIsa isa;
  PackedProblem p;
  int64_t panels;
  // The split: row_parts x col_parts tasks, row part r covering tiles
  // [r * units / row_parts, (r + 1) * units / row_parts) of `unit` rows,
  // column group c panels [c * width, (c + 1) * width).
  int64_t unit = 1, units = 1, width = 1, row_parts = 1, col_parts = 1;

  int64_t Row(int64_t r) const { return std::min(p.m, r * units / row_parts * unit); }
  int64_t Panel(int64_t c) const { return std::min(panels, c * width); }
};
}  // namespace

void SgemmPackedB(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const float* packed, const float* bias, const Activation& act, float* c,
                  int64_t ldc, ThreadPool* pool) {
  SgemmPackedB(ActivePackedIsa(), m, n, k, a, lda, packed, bias, act, c, ldc, pool);
}

void SgemmPackedB(PackedIsa isa, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const float* packed, const float* bias, const Activation& act, float* c,
                  int64_t ldc, ThreadPool* pool) {
  if (m == 0 || n == 0) return;
  Job job{isa, PackedProblem{m, n, k, a, lda, packed, bias, &act, c, ldc},
          (n + kPackedPanel - 1) / kPackedPanel};
  const int64_t threads = pool ? pool->num_threads() : 1;
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * k;
  // Below ~256K flops (3-10 us of work) a round trip to the pool costs more
  // than it saves (measured: with 64K, the mlp policy at batch 1, four
  // layers of 64-256 x 256, took 18 us with 2 threads against 10 us with 1).
  constexpr double kMinParallelFlops = 262144.0;
  if (threads == 1 || flops < kMinParallelFlops) {
    PackedBlock(isa, job.p, 0, m, 0, job.panels);
    return;
  }
  // Row blocks of whole tiles when there are two or more a thread: each thread
  // then reads its rows of A once. Measured against column panels over the
  // whole product (bench/gemm_split_bench.cc, 2 threads), rows were as fast
  // or faster on every policy shape with M >= 32: up to 2x on AVX-512, where
  // a split into single panels halves the 2-panel register tile.
  // Fewer rows: column groups as wide as the tile, crossed with row blocks
  // when the groups alone are too few to keep every thread busy. Tiles of a
  // few rows are wider (up to 8 panels for one row); such products stream B
  // rather than compute, so their groups narrow to a full tile's width when
  // that gives every thread a part of B.
  job.unit = PackedTileRows(isa);
  job.units = (m + job.unit - 1) / job.unit;
  job.width = PackedTilePanels(isa, std::min(m, job.unit));
  const int64_t full_width = PackedTilePanels(isa, job.unit);
  while (job.width > full_width && (job.panels + job.width - 1) / job.width < 2 * threads)
    job.width /= 2;
  const int64_t groups = (job.panels + job.width - 1) / job.width;
  job.row_parts = job.units;
  if (job.units < 2 * threads) {
    job.col_parts = groups;
    job.row_parts =
        groups >= 2 * threads ? 1 : std::min(job.units, (2 * threads + groups - 1) / groups);
  }
  const int64_t tasks = job.row_parts * job.col_parts;
  // The pool's units: the tiles' flops, plus, where B is larger than a
  // core's L2 holds, its floats streamed from the last-level cache, which
  // bound products of few rows (one row: 2 flops a float). Measured with 16
  // threads on AVX-512: 1 x 512 x 3136 (6.4 MB of B) 36 us against 212 on one
  // thread; 1 x 1024 x 256 (1 MB, in L2) 9 us on one thread, 13 on five.
  const double b_floats = static_cast<double>(k) * job.panels * kPackedPanel;
  const double cost = flops / PackedFlopsPerCostUnit(isa) +
                      (b_floats > kL2Floats ? kStreamCostPerFloat * b_floats : 0.0);
  pool->ParallelFor(tasks, cost / tasks, [&job](int64_t t0, int64_t t1) {
    if (job.col_parts == 1) {
      PackedBlock(job.isa, job.p, job.Row(t0), job.Row(t1), 0, job.panels);
      return;
    }
    // Tasks run row part by row part; each part's run of column groups is one block.
    for (int64_t t = t0; t < t1;) {
      const int64_t r = t / job.col_parts, end = std::min(t1, (r + 1) * job.col_parts);
      PackedBlock(job.isa, job.p, job.Row(r), job.Row(r + 1), job.Panel(t - r * job.col_parts),
                  job.Panel(end - r * job.col_parts));
      t = end;
    }
  });
}

}  // namespace cpu
}  // namespace kaiwu
