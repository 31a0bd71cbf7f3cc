// Cross-process transport for the inference server on one machine: a POSIX
// shared-memory segment with one slot per client. A client writes its rows
// straight into its slot, rings a futex doorbell and sleeps on its slot's
// futex; the server gathers rows from the slots into the batch and scatters
// results back into them. No array is serialized.
//
// Slot state word (32-bit, futex): (generation << 8) | phase. A slot's
// generation changes when the server reclaims it (its client died or went
// silent), so a stale client can never act on a slot someone else now owns.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/server.h"

namespace kaiwu {

namespace shm {
enum Phase : uint32_t { kFree = 0, kIdle = 1, kRequest = 2, kBusy = 3, kResponse = 4 };
constexpr uint64_t kMagic = 0x4B41495755534D31ull;  // "KAIWUSM1"
/// Error codes carried in a slot: StatusCode values, or these.
constexpr int32_t kErrClosed = 100, kErrQueueFull = 101, kErrReclaimed = 102;

/// Description of one array in a slot.
struct Field {
  std::string name;
  DType dtype = DType::kUndefined;
  int axis = 0;          ///< batch axis (-1: none, the whole output)
  Shape dims;            ///< shape at batch 1
  size_t row_bytes = 0;  ///< bytes per row (whole size when axis == -1)
  size_t offset = 0;     ///< offset in the slot
};
}  // namespace shm

class ShmServer {
 public:
  /// Creates segment `name` (in /dev/shm) and starts the listener thread.
  ShmServer(std::shared_ptr<InferenceServer> server, const std::string& name, int max_clients,
            int max_rows, double client_timeout_s);
  ~ShmServer();
  void Close();
  const std::string& name() const { return name_; }
  int clients() const;  ///< slots held now

 private:
  void Listen();
  void Reap();
  void Handle(int slot);
  char* Slot(int i) const;

  std::shared_ptr<InferenceServer> server_;
  std::string name_;
  int max_clients_, max_rows_;
  double timeout_s_;
  std::vector<shm::Field> ins_, outs_;
  size_t slot_bytes_ = 0, total_bytes_ = 0;
  char* base_ = nullptr;
  std::atomic<bool> stop_{false};
  std::atomic<int> inflight_{0};
  std::thread listener_;
};

class ShmClient {
 public:
  /// Maps segment `name` and claims a free slot (throws kInput if none).
  ShmClient(const std::string& name, double timeout_s);
  ~ShmClient();
  const std::vector<shm::Field>& inputs() const { return ins_; }
  const std::vector<shm::Field>& outputs() const { return outs_; }
  int max_rows() const { return max_rows_; }
  int slot() const { return slot_; }
  /// Where input i's rows go (write there directly to skip a copy).
  void* InputData(size_t i) const;
  /// Runs one step for `rows` rows already in the input areas. Outputs are
  /// views into the slot, valid until the next call. Throws the server's error.
  std::vector<TensorView> Step(int64_t rows, const std::vector<uint8_t>& done,
                               const std::string& version);
  void Heartbeat();
  void Close();

 private:
  char* SlotPtr() const;
  std::string name_;
  double timeout_s_;
  std::vector<shm::Field> ins_, outs_;
  size_t total_bytes_ = 0, slot_bytes_ = 0;
  int max_rows_ = 0, max_clients_ = 0, slot_ = -1;
  uint32_t gen_ = 0;
  char* base_ = nullptr;
};

}  // namespace kaiwu
