// Static placement of intermediate buffers in one arena: buffers whose
// lifetimes (step intervals) overlap never overlap in memory.
#pragma once

#include <cstddef>
#include <vector>

namespace kaiwu {

struct BufferRequest {
  size_t bytes = 0;
  int first_use = 0;  // step that writes it
  int last_use = 0;   // last step that reads it (inclusive)
};

struct MemoryPlan {
  std::vector<size_t> offsets;  // per request, aligned
  size_t total_bytes = 0;
};

/// Greedy by size: largest buffers first, each at the lowest aligned offset
/// that fits between buffers already placed whose lifetimes overlap its own.
MemoryPlan PlanMemory(const std::vector<BufferRequest>& requests, size_t alignment = 64);

}  // namespace kaiwu
