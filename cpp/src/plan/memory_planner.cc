#include "plan/memory_planner.h"

#include <algorithm>
#include <numeric>

namespace kaiwu {

MemoryPlan PlanMemory(const std::vector<BufferRequest>& requests, size_t alignment) {
  auto align = [&](size_t x) { return (x + alignment - 1) / alignment * alignment; };
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return requests[a].bytes > requests[b].bytes; });
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  std::vector<size_t> placed;
  for (size_t idx : order) {
    const BufferRequest& r = requests[idx];
    size_t size = align(r.bytes);
    // Memory ranges of placed buffers alive at the same time, by offset.
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t p : placed) {
      const BufferRequest& q = requests[p];
      if (q.first_use <= r.last_use && r.first_use <= q.last_use)
        busy.emplace_back(plan.offsets[p], plan.offsets[p] + align(q.bytes));
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& range : busy) {
      if (range.first >= offset + size) break;  // fits in the gap before this range
      offset = std::max(offset, range.second);
    }
    plan.offsets[idx] = offset;
    plan.total_bytes = std::max(plan.total_bytes, offset + size);
    placed.push_back(idx);
  }
  return plan;
}

}  // namespace kaiwu
