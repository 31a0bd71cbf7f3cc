// An accelerator behind the planner: its kernel registry, its memory and its
// streams. A plan built for a device keeps every intermediate, input and
// output buffer in device memory, reads weights from their device copies
// (WeightSet::device), and copies feeds in and results out once per run. The
// CPU backend is the null device.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/kernel.h"

namespace kaiwu {

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  /// e.g. "cuda:0 (NVIDIA H100 80GB HBM3)".
  virtual std::string name() const = 0;
  /// The backend's name in messages about what it supports, e.g. "CUDA".
  virtual const char* backend() const = 0;
  virtual const KernelRegistry& kernels() const = 0;
  /// Makes this device the calling thread's current one (kernel objects may
  /// allocate at Prepare, and launches go to the current device).
  virtual void MakeCurrent() const = 0;
  /// Device memory, freed when the last holder lets go.
  virtual std::shared_ptr<void> Alloc(size_t bytes) const = 0;
  /// A device copy of host memory (synchronous).
  virtual std::shared_ptr<void> Upload(const void* host, size_t bytes) const = 0;

  /// One run at a time: a stream, staging buffers in page-locked host memory
  /// and the kernels' DeviceContext. A plan keeps one per concurrent run.
  class Stream {
   public:
    virtual ~Stream() = default;
    /// What kernels receive as KernelIO::device.
    virtual const void* kernel_context() const = 0;
    /// Names the step about to be launched, for errors kernels report.
    virtual void SetStep(int step) = 0;
    /// Queues a host -> device copy; `host` may be reused once this returns.
    virtual void CopyIn(void* device_dst, const void* host, size_t bytes) = 0;
    /// Queues a device -> host copy; `host` is written when Finish returns.
    virtual void CopyOut(void* host, const void* device_src, size_t bytes) = 0;
    /// Waits for everything queued. Throws kRuntime if a launch failed or a
    /// kernel reported bad data; `describe_step` names the step's node.
    virtual void Finish(const std::function<std::string(int)>& describe_step) = 0;

    // Replay of recorded launches (CUDA graphs): one launch instead of one per
    // kernel. A recording is keyed by the device addresses its launches read
    // beyond the plan's own buffers (the weights' device copies): equal keys
    // mean equal launches.
    /// Launches the recording for `key`; false if there is none.
    virtual bool Replay(const std::vector<const void*>& key) = 0;
    /// Starts recording the launches that follow; false when recording is
    /// off (then launch directly).
    virtual bool BeginRecord() = 0;
    /// Ends the recording. With `ok`, keeps it under `key` and launches it.
    /// Returns false when nothing ran (`ok` false because a launch threw, or
    /// the recording failed): recording is then off for this stream, and the
    /// caller launches directly.
    virtual bool EndRecord(const std::vector<const void*>& key, bool ok) = 0;
  };
  /// Staging capacity: the sum of StagingBytes() over the CopyIn / CopyOut
  /// calls of one run. `needs`: DeviceNeed bits (backends/kernel.h) of the
  /// plan's kernels.
  virtual std::unique_ptr<Stream> NewStream(size_t in_bytes, size_t out_bytes, uint32_t needs) const = 0;
  /// Staging one copy of `bytes` takes (each copy starts 256-byte aligned).
  static size_t StagingBytes(size_t bytes) { return (bytes + 255) / 256 * 256; }
};

/// The backend for a device name: "cpu" gives null; "cuda" or "cuda:N" the
/// CUDA backend. Throws kUnsupported when this build or machine lacks it.
const DeviceBackend* FindDevice(const std::string& name);

/// True when this build has the CUDA backend and a CUDA device is present.
bool CudaAvailable();

}  // namespace kaiwu
