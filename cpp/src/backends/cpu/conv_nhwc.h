// Channels-last 2-D Conv on the CPU (NhwcConv, float32, group 1, no
// dilation): an implicit GEMM whose rows are output pixels and whose columns
// are output channels, so that a register tile writes whole runs of y
// [N, OH, OW, M] and reads the weight as the packed-B panels of the GEMM
// (sgemm_packed.h: [ceil(M / 16), K, 16], K = KH * KW * C, built by static
// nodes: PrepackNhwcConvWeights in passes/prepack_gemm.cc). In NHWC one kernel row of a pixel's
// patch (KW taps x C channels) is KW * C consecutive floats of x, so a pixel
// row of the implicit im2col matrix is KH such runs, found by one offset per
// pixel: nothing is packed on the A side. Padded inputs are first copied
// into a zero-bordered image per thread.
//
// The register tiles are compiled once per instruction set (conv_nhwc_avx2.cc,
// conv_nhwc_avx512.cc) and chosen at run time like SgemmPackedB's
// (KAIWU_CPU_ISA caps the choice); every output element sums in the same
// order whatever the thread split and tile. On AVX-512 a panel computed alone
// (16-channel convs) takes run tiles where pixels of one output row follow
// each other: one pointer reaches all their patches, up to 24 rows a tile
// (KAIWU_CONV_RUN_TILES=0 turns them off).
#pragma once

#include <cstdint>

#include "backends/cpu/activation.h"

namespace kaiwu {
namespace cpu {

/// Rows of one image: row p of the implicit im2col matrix is the KH runs
/// x + off[p] + h * row_stride (h < kh) of seg floats each.
struct NhwcConvProblem {
  const float* x;
  const int32_t* off;
  int64_t kh, seg, row_stride;
  int64_t m;             // output channels (columns)
  const float* packed;   // [ceil(m / 16), kh * seg, 16]
  const float* bias;     // m floats or null
  const Activation* act;
  float* y;              // row p at y + p * m
  const float* sum = nullptr;  // or rows like y's, added before the activation
  // Consecutive rows whose patches are equally far apart (pixels of one
  // output row) as run tiles where the variant has them (AVX-512, one panel).
  // Off: every tile reads through its rows' offsets. The sums are the same.
  bool run_tiles = true;
};

enum class PackedIsa;  // sgemm_packed_isa.h

/// y rows [p0, p1) x column panels [q0, q1) (16 columns each, the last one
/// partial) of `pr` with the given instruction-set variant.
void NhwcConvRows(PackedIsa isa, const NhwcConvProblem& pr, int64_t p0, int64_t p1, int64_t q0,
                  int64_t q1);

/// Run tiles computed by this thread so far (NhwcConvProblem::run_tiles), a
/// count for tests.
int64_t& NhwcConvRunTileCount();

/// Panels one full-height register tile of the variant covers: a split of the
/// columns into groups of this many panels keeps every tile whole.
int64_t NhwcConvPanelGroup(PackedIsa isa);

#if defined(__x86_64__) || defined(_M_X64)
namespace isa_avx2 {
void NhwcConvRows(const NhwcConvProblem& pr, int64_t p0, int64_t p1, int64_t q0, int64_t q1);
int64_t PanelGroup();
}  // namespace isa_avx2
namespace isa_avx512 {
void NhwcConvRows(const NhwcConvProblem& pr, int64_t p0, int64_t p1, int64_t q0, int64_t q1);
int64_t PanelGroup();
}  // namespace isa_avx512
#endif

}  // namespace cpu
}  // namespace kaiwu
