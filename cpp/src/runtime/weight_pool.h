// Storage for weight versions, pooled per value: a refit writes into a buffer
// that no live version holds (the one freed by the version before last, in
// steady state), so that refits allocate nothing once two versions have been
// built, and runs in flight keep reading the buffers of the version they hold.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "kaiwu/session.h"
#include "kaiwu/tensor.h"

namespace kaiwu {

class DeviceBackend;

/// One value's storage in one or more versions.
struct WeightBuffer {
  Tensor host;                   ///< page-locked on a device session
  std::shared_ptr<void> device;  ///< the device copy (device sessions)
  int holders = 0;               ///< versions holding it; under the pool's mutex
  /// Device sessions: whether `host` holds the value. False after a refit
  /// from device memory until something on the host asks for it.
  std::atomic<bool> host_current{true};
  std::mutex host_fill_mu;
};

class WeightPool {
 public:
  /// `device`: every buffer also gets device memory, and host memory that is
  /// page-locked (so that uploads run at full bus speed).
  WeightPool(size_t num_values, const DeviceBackend* device);
  ~WeightPool();
  WeightPool(const WeightPool&) = delete;
  WeightPool& operator=(const WeightPool&) = delete;

  const DeviceBackend* device() const { return device_; }

  /// A buffer of `value` that no version holds (allocated if there is none),
  /// now held once. Every buffer of a value has the same dtype and shape.
  WeightBuffer* Acquire(int value, DType dtype, const Shape& shape);
  /// One more hold on each non-null buffer.
  void Hold(const std::vector<WeightBuffer*>& buffers);
  /// One hold less on each non-null buffer; a value keeps at most two free.
  void Release(const std::vector<WeightBuffer*>& buffers);

  /// Device pools: page-locked host and device staging of at least `bytes`,
  /// which a refit from host arrays fills and uploads in chunks. Kept, and
  /// grown only when asked for more, so that steady refits allocate nothing.
  /// One builder uses it at a time (WeightBuilder::Build is serialized).
  struct Staging {
    std::shared_ptr<void> host, device;
    size_t bytes = 0;
  };
  const Staging& staging(size_t bytes);

  WeightMemoryStats stats() const;

 private:
  const DeviceBackend* device_;
  mutable std::mutex mu_;
  std::vector<std::vector<std::unique_ptr<WeightBuffer>>> slots_;  // by value id
  WeightMemoryStats stats_;
  Staging staging_;
};

}  // namespace kaiwu
