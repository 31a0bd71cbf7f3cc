// GEMM against a prepacked constant B: C[M, N] = act(A[M, K] * B[K, N] + bias).
//
// B arrives packed in column panels of kPanel floats, [ceil(N / kPanel), K,
// kPanel] row-major (columns past N zero), so that the register tile reads
// one contiguous 64-byte row of the panel per step of k. The layout is built
// by ordinary graph nodes (Pad, Reshape, Transpose: passes/prepack_gemm.cc)
// in the static program, so a refit re-packs it with the weights.
#pragma once

#include <cstdint>

#include "backends/cpu/activation.h"
#include "core/thread_pool.h"

namespace kaiwu {
namespace cpu {

/// Floats per column panel of a packed B; fixed, so the packing nodes do not
/// depend on the machine that runs them.
constexpr int64_t kPackedPanel = 16;

/// The packed layout, from B [K, N] row-major (`trans_b` false) or its
/// transpose [N, K]; a reference for tests (graphs pack with nodes).
void PackB(bool trans_b, int64_t k, int64_t n, const float* b, float* packed);

/// C (ldc) = act(A (lda) * unpack(packed) + bias); bias has n floats or is
/// null. Runs the widest instruction-set variant the CPU has (capped by
/// KAIWU_CPU_ISA: sgemm_packed_isa.h). Splits row blocks and column panels across the pool; every element is
/// summed in the same order whatever the split, so 1 and N threads agree.
void SgemmPackedB(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const float* packed, const float* bias, const Activation& act, float* c,
                  int64_t ldc, ThreadPool* pool);

enum class PackedIsa;  // sgemm_packed_isa.h
/// The same with a given instruction-set variant (tests; it must be available).
void SgemmPackedB(PackedIsa isa, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const float* packed, const float* bias, const Activation& act, float* c,
                  int64_t ldc, ThreadPool* pool);

}  // namespace cpu
}  // namespace kaiwu
