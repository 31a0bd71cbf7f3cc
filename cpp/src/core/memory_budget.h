// The memory budget: the most bytes that one tensor, a model's weights or one
// execution plan may take. Every size that comes from a model file (dims, raw
// data, external data) or appears only at plan time (a node's output shape, a
// plan's arena) is checked against it before anything is allocated, so that a
// malformed model or an oversized feed fails with an error that names the
// place, instead of std::bad_alloc or the kernel's OOM killer.
#pragma once

#include <cstdint>
#include <string>

#include "kaiwu/tensor.h"

namespace kaiwu {

/// The process default: $KAIWU_MEMORY_BUDGET when set (bytes, or a number with
/// a K/M/G/T suffix, powers of 1024), else the machine's physical memory, or
/// the cgroup's memory limit where that is lower. A malformed
/// $KAIWU_MEMORY_BUDGET throws kInput.
uint64_t DefaultMemoryBudget();

/// The budget in force on the calling thread: the innermost live
/// MemoryBudgetScope's, else DefaultMemoryBudget().
uint64_t CurrentMemoryBudget();

/// Puts a budget in force on the calling thread while alive (0: the default).
/// Session::Load and plan building open one with SessionOptions::memory_budget,
/// so that the importer, the static program and the planner all see it.
class MemoryBudgetScope {
 public:
  explicit MemoryBudgetScope(uint64_t bytes);
  ~MemoryBudgetScope();
  MemoryBudgetScope(const MemoryBudgetScope&) = delete;
  MemoryBudgetScope& operator=(const MemoryBudgetScope&) = delete;

 private:
  uint64_t saved_;
};

/// The byte size of a tensor of `shape` and `dtype` into `*bytes`; false when a
/// dimension is negative or the size does not fit in 64 bits.
bool TensorBytes(const Shape& shape, DType dtype, uint64_t* bytes);

/// a + b, saturating at UINT64_MAX.
inline uint64_t AddBytes(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }

/// A readable size: "512 B", "3.0 MiB", "1.5 TiB"; "more than 16 EiB" for UINT64_MAX.
std::string FormatBytes(uint64_t bytes);

/// The end of every over-budget message: "the memory budget (X; raise it with
/// memory_budget= or $KAIWU_MEMORY_BUDGET)".
std::string BudgetText(uint64_t budget);

/// Parses "1048576", "512M", "8G", "1.5GiB" into bytes; false when malformed.
bool ParseByteCount(const std::string& text, uint64_t* bytes);

}  // namespace kaiwu
