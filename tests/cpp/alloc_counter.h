// Heap allocations made by the calling thread: the test binary replaces the
// global operator new (alloc_counter.cc) with one that counts per thread, so
// a test can assert that a hot path (a ParallelFor, a kernel's Run) makes none.
#pragma once

#include <cstdint>

namespace kaiwu {

/// operator new calls (every form but the aligned ones) made by this thread so far.
int64_t ThreadAllocations();

}  // namespace kaiwu
