// The instruction-set variants of the prepacked-B GEMM (sgemm_packed.h):
// sgemm_packed_tiles.inc compiled once per variant with its own flags
// (sgemm_packed_avx2.cc, sgemm_packed_avx512.cc; CMakeLists.txt sets them),
// chosen at run time by cpuid, so a build need not target the machine.
#pragma once

#include <cstdint>

#include "backends/cpu/activation.h"

namespace kaiwu {
namespace cpu {

/// One C = act(A * packed B + bias) problem (see SgemmPackedB).
struct PackedProblem {
  int64_t m, n, k;
  const float* a;
  int64_t lda;
  const float* packed;
  const float* bias;
  const Activation* act;
  float* c;
  int64_t ldc;
};

enum class PackedIsa { kScalar, kAvx2, kAvx512 };

/// The variant this machine runs: the widest the CPU has, unless the
/// environment variable KAIWU_CPU_ISA caps it ("avx2" or "scalar"; "avx512"
/// or unset: no cap). Read on every call (SgemmPackedB caches it).
PackedIsa DetectPackedIsa();
/// The variant SgemmPackedB uses (DetectPackedIsa() at first use) and its name.
PackedIsa ActivePackedIsa();
const char* PackedIsaName(PackedIsa isa);
/// Whether this build and CPU can run `isa`.
bool PackedIsaAvailable(PackedIsa isa);

/// Rows [r0, r1) x column panels [q0, q1) of C with the given variant
/// (which must be available); rows per register tile for splitting.
void PackedBlock(PackedIsa isa, const PackedProblem& p, int64_t r0, int64_t r1, int64_t q0,
                 int64_t q1);
int64_t PackedTileRows(PackedIsa isa);
/// Panels of B one register tile spans when the block has `rows` rows (the
/// tile's width; a column split that cuts through a tile narrows it).
int64_t PackedTilePanels(PackedIsa isa, int64_t rows);
/// Flops of this variant's tiles per unit of ThreadPool::ParallelFor's cost,
/// whose units are scalar operations (~0.075 ns: a helper costs ~20000 of
/// them): the tiles run about 150 GFLOP/s a core with AVX-512 and 70 with
/// AVX2, so a GEMM or convolution passing flops as cost would have the pool
/// wake ten times the helpers that pay for themselves.
double PackedFlopsPerCostUnit(PackedIsa isa);

#if defined(__x86_64__) || defined(_M_X64)
#define KAIWU_PACKED_X86 1
namespace isa_avx2 {
void Block(const PackedProblem& p, int64_t r0, int64_t r1, int64_t q0, int64_t q1);
int64_t TileRows();
int64_t TilePanels(int64_t rows);
}  // namespace isa_avx2
namespace isa_avx512 {
void Block(const PackedProblem& p, int64_t r0, int64_t r1, int64_t q0, int64_t q1);
int64_t TileRows();
int64_t TilePanels(int64_t rows);
}  // namespace isa_avx512
#endif

}  // namespace cpu
}  // namespace kaiwu
