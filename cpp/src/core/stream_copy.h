// Copies that write with streaming (non-temporal) stores: whole cache lines go
// to memory without being read first, so a copy whose destination is not in
// cache moves two bytes of memory traffic per byte instead of three, and
// leaves the cache to other data. For destinations no CPU reads next: a GPU
// refit's page-locked staging, which only the copy engine reads. (Refit's CPU
// weight copies use ordinary stores: the runs after a refit read the new
// weights, and found them in memory instead of cache when these were used.)
#pragma once

#include <cstddef>
#include <cstdint>

namespace kaiwu {

/// Whether this CPU has streaming stores (x86-64 always does).
bool HasStreamingStores();

/// memcpy with streaming stores for the whole 64-byte lines of `dst`.
/// Call StreamFence() before another thread reads `dst`.
void StreamCopy(void* dst, const void* src, size_t bytes);

/// Orders this thread's streaming stores before its later stores (a no-op
/// where there are none).
void StreamFence();

/// memcpy of `n` 4-byte elements that also tells whether any of them has every
/// bit of `mask` set (0x7f800000: a float32 NaN or Inf) in the same pass, each
/// vector checked between its load and its store (refit's finite check).
bool CopyCheckBits32(void* dst, const void* src, int64_t n, uint32_t mask);

/// Transpose32 (out[r * cols + c] = src[r + c * ld]) writing whole lines with
/// streaming stores where `cols` is a multiple of 16 and `out` is 64-byte
/// aligned (GEMM weight panels of 16 columns); else Transpose32 itself.
void Transpose32Stream(const void* src, int64_t rows, int64_t cols, int64_t ld, void* out);

}  // namespace kaiwu
