#include "backends/cuda/memory.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "backends/cuda/cuda_kernels.h"

namespace kaiwu {
namespace cuda {

std::shared_ptr<void> AllocPinned(int ordinal, size_t bytes) {
  CheckCuda(cudaSetDevice(ordinal), "cudaSetDevice");
  void* p = nullptr;
  CheckCuda(cudaHostAlloc(&p, bytes ? bytes : 64, cudaHostAllocPortable), "cudaHostAlloc");
  return std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
}

DeviceBackend::Location Locate(const void* p) {
  cudaPointerAttributes a{};
  if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // not known to CUDA: pageable host memory
    return {MemKind::kHost, -1};
  }
  switch (a.type) {
    case cudaMemoryTypeDevice:
    case cudaMemoryTypeManaged:
      return {MemKind::kDevice, a.device};
    case cudaMemoryTypeHost:
      return {MemKind::kPinned, -1};
    default:
      return {MemKind::kHost, -1};
  }
}

namespace {

// One device allocation of a pool, and the fences of its last holder's readers:
// events recorded on the streams that read it, at the moment it was let go.
struct Slot {
  void* memory = nullptr;
  std::vector<cudaEvent_t> events;
  int fences = 0;  // events[0..fences) to wait for before the next write
};

class Pool;

class Block final : public ResultBlock {
 public:
  Block(std::shared_ptr<Pool> pool, Slot* slot) : pool_(std::move(pool)), slot_(slot) {}
  ~Block() override;
  void* data() const override { return slot_->memory; }
  void AddReader(uintptr_t stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (std::find(readers_.begin(), readers_.end(), stream) == readers_.end())
      readers_.push_back(stream);
  }
  Slot* slot() const { return slot_; }

 private:
  std::shared_ptr<Pool> pool_;
  Slot* slot_;
  std::mutex mu_;
  std::vector<uintptr_t> readers_;
};

class Pool final : public DeviceBackend::ResultPool, public std::enable_shared_from_this<Pool> {
 public:
  Pool(int ordinal, size_t bytes) : ordinal_(ordinal), bytes_(bytes) {}
  ~Pool() override {
    cudaSetDevice(ordinal_);
    for (Slot* s : free_) {
      for (cudaEvent_t e : s->events) cudaEventDestroy(e);
      cudaFree(s->memory);  // waits for pending work on it
      delete s;
    }
  }

  std::shared_ptr<ResultBlock> Acquire() override {
    Slot* slot = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        slot = free_.back();
        free_.pop_back();
      }
    }
    if (!slot) {
      CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
      void* p = nullptr;
      CheckCuda(cudaMalloc(&p, bytes_ ? bytes_ : 256), "cudaMalloc (results)");
      slot = new Slot{p, {}, 0};
    }
    return std::make_shared<Block>(shared_from_this(), slot);
  }

  // Blocks come back with their fences recorded. All are kept until the pool
  // goes (cudaFree would synchronize the device on a hot path).
  void Return(Slot* slot, const std::vector<uintptr_t>& readers) {
    cudaSetDevice(ordinal_);
    slot->fences = 0;
    for (uintptr_t r : readers) {
      if (slot->fences == static_cast<int>(slot->events.size())) {
        cudaEvent_t e = nullptr;
        if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) break;
        slot->events.push_back(e);
      }
      if (cudaEventRecord(slot->events[slot->fences], reinterpret_cast<cudaStream_t>(r)) ==
          cudaSuccess)
        ++slot->fences;
    }
    cudaGetLastError();  // a reader stream the caller already destroyed is not fatal here
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(slot);
  }

 private:
  int ordinal_;
  size_t bytes_;
  std::mutex mu_;
  std::vector<Slot*> free_;
};

Block::~Block() {
  std::lock_guard<std::mutex> lock(mu_);
  pool_->Return(slot_, readers_);
}

}  // namespace

std::shared_ptr<DeviceBackend::ResultPool> NewResultPool(int ordinal, size_t bytes) {
  return std::make_shared<Pool>(ordinal, bytes);
}

void WaitForReaders(ResultBlock* block, cudaStream_t stream) {
  Slot* slot = static_cast<Block*>(block)->slot();
  for (int i = 0; i < slot->fences; ++i)
    CheckCuda(cudaStreamWaitEvent(stream, slot->events[i], 0), "waiting for a result's readers");
  slot->fences = 0;
}

}  // namespace cuda
}  // namespace kaiwu
