#include "runtime/weight_pool.h"

#include <cstdint>
#include <cstdlib>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "backends/device.h"

namespace kaiwu {

namespace {
constexpr size_t kKeepFree = 2;  // free buffers a value keeps (a server may drop many versions)

// Host storage of a CPU buffer. From 2 MB up it is mapped on its own, starts
// on a 2 MB boundary and asks for transparent huge pages before it is first
// touched: a refit's strided reads and writes (GEMM panels) and the runs'
// reads of a large weight then walk a few TLB entries instead of one per 4 KB
// (numpy does the same for its large arrays).
std::shared_ptr<void> HostStorage(size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr size_t kHuge = size_t{2} << 20, kPage = 4096;
  if (bytes >= kHuge) {
    const size_t len = (bytes + kPage - 1) / kPage * kPage;
    void* map = mmap(nullptr, len + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    if (map == MAP_FAILED) throw std::bad_alloc();
    char* base = static_cast<char*>(map);
    char* p = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(base) + kHuge - 1) & ~(kHuge - 1));
    if (p > base) munmap(base, static_cast<size_t>(p - base));  // trim to the aligned range
    const size_t tail = static_cast<size_t>(base + len + kHuge - (p + len));
    if (tail) munmap(p + len, tail);
    madvise(p, len, MADV_HUGEPAGE);  // advice only: ignored where THP is off
    return std::shared_ptr<void>(p, [len](void* q) { munmap(q, len); });
  }
#endif
  return std::shared_ptr<void>(AlignedAlloc(bytes), AlignedFree);
}
}  // namespace

WeightPool::WeightPool(size_t num_values, const DeviceBackend* device)
    : device_(device), slots_(num_values) {}

WeightPool::~WeightPool() = default;

WeightBuffer* WeightPool::Acquire(int value, DType dtype, const Shape& shape) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& b : slots_[value]) {
      if (b->holders == 0) {
        b->holders = 1;
        return b.get();
      }
    }
  }
  // Allocate outside the lock: page-locked and device memory are slow to get.
  auto b = std::make_unique<WeightBuffer>();
  const size_t bytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  const size_t rounded = (bytes + 63) / 64 * 64;
  if (device_) {
    b->host = Tensor(dtype, shape, device_->AllocPinned(rounded ? rounded : 64));
    b->device = device_->Alloc(rounded);
  } else {
    b->host = Tensor(dtype, shape, HostStorage(rounded ? rounded : 64));
  }
  b->holders = 1;
  std::lock_guard<std::mutex> lock(mu_);
  stats_.host_buffers += 1;
  stats_.host_bytes += bytes;
  if (device_) {
    stats_.device_buffers += 1;
    stats_.device_bytes += bytes;
  }
  slots_[value].push_back(std::move(b));
  return slots_[value].back().get();
}

void WeightPool::Hold(const std::vector<WeightBuffer*>& buffers) {
  std::lock_guard<std::mutex> lock(mu_);
  for (WeightBuffer* b : buffers)
    if (b) ++b->holders;
}

void WeightPool::Release(const std::vector<WeightBuffer*>& buffers) {
  std::vector<std::unique_ptr<WeightBuffer>> drop;  // freed outside the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t v = 0; v < buffers.size(); ++v) {
      WeightBuffer* b = buffers[v];
      if (!b || --b->holders > 0) continue;
      auto& slot = slots_[v];
      size_t free = 0;
      for (auto& x : slot) free += x->holders == 0;
      if (free <= kKeepFree) continue;
      for (auto it = slot.begin(); it != slot.end(); ++it) {
        if (it->get() == b) {
          drop.push_back(std::move(*it));
          slot.erase(it);
          break;
        }
      }
    }
  }
}

const WeightPool::Staging& WeightPool::staging(size_t bytes) {
  if (staging_.bytes >= bytes || !device_) return staging_;
  const size_t rounded = (bytes + 4095) / 4096 * 4096;
  Staging next;
  next.host = device_->AllocPinned(rounded);
  next.device = device_->Alloc(rounded);
  next.bytes = rounded;
  std::lock_guard<std::mutex> lock(mu_);
  stats_.host_buffers += 1;
  stats_.device_buffers += 1;
  stats_.host_bytes += rounded;
  stats_.device_bytes += rounded;
  staging_ = std::move(next);
  return staging_;
}

WeightMemoryStats WeightPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace kaiwu
