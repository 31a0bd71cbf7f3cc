// An accelerator behind the planner: its kernel registry, its memory and its
// streams. A plan built for a device keeps every intermediate, input and
// output buffer in device memory, reads weights from their device copies
// (WeightSet::device), and copies feeds in and results out once per run. The
// CPU backend is the null device.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/kernel.h"

namespace kaiwu {

/// Where the memory of one copy in or out lives.
enum class MemKind : uint8_t {
  kHost,    ///< pageable host memory: staged through page-locked buffers
  kPinned,  ///< page-locked host memory: one DMA, no staging copy
  kDevice,  ///< the plan's device: a device-to-device copy
};

/// A session's counts of what its runs moved (IoStats in kaiwu/session.h).
struct IoCounters {
  std::atomic<uint64_t> runs{0}, h2d_copies{0}, h2d_bytes{0}, d2h_copies{0}, d2h_bytes{0},
      d2d_copies{0}, d2d_bytes{0}, staging_copies{0}, staging_bytes{0}, status_reads{0},
      stream_waits{0}, stream_signals{0}, graph_launches{0}, graph_nodes{0},
      graph_updates{0};
  static void Add(std::atomic<uint64_t>& c, uint64_t n) { c.fetch_add(n, std::memory_order_relaxed); }
};

/// Device memory holding one run's results for the caller (device outputs),
/// from a ResultPool. Destroying it returns the memory to the pool.
class ResultBlock {
 public:
  virtual ~ResultBlock() = default;
  virtual void* data() const = 0;
  /// Notes a stream (cudaStream_t as an integer) that reads the block: when the
  /// block is let go, the next run that writes it first waits for the work
  /// queued on that stream by then. Thread-safe.
  virtual void AddReader(uintptr_t stream) = 0;
};

/// The I/O of one device run beyond the pointers themselves.
struct DeviceRunIO {
  const MemKind* feeds = nullptr;    ///< per graph input; null: all kHost
  const MemKind* outputs = nullptr;  ///< per graph output; null: all kHost
  /// Caller streams whose queued work the run waits for.
  static constexpr int kMaxWaits = 8;
  uintptr_t wait[kMaxWaits] = {};
  int num_wait = 0;
  /// A caller stream that waits for the run's end.
  bool signal = false;
  uintptr_t signal_stream = 0;
  /// The results' block (device outputs): written only after its readers.
  ResultBlock* result_block = nullptr;
  IoCounters* counters = nullptr;
};

/// rows x cols elements copied within device memory to `dst` (contiguous) from
/// `src` at element src_offset + r * row_stride + c * col_stride: one piece of
/// a refit's device-side writes (CopyBlock with its pointers bound).
struct DeviceCopyJob {
  void* dst = nullptr;
  const void* src = nullptr;
  int64_t src_offset = 0, rows = 1, cols = 0, row_stride = 0, col_stride = 1;
  int elem_size = 4;
  /// Look for NaN/Inf while copying: the float dtype's size (2, 4, 8), or 0.
  int check = 0;
  /// Reported back with a non-finite element (Stream::TakeCopyFault).
  int tag = 0;
};

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
  /// Copies device memory to host memory (synchronous; outside any run).
  virtual void Download(void* host, const void* device_src, size_t bytes) const = 0;
  /// Page-locked host memory (DMA without staging), freed with the last holder.
  virtual std::shared_ptr<void> AllocPinned(size_t bytes) const = 0;
  /// Where `p` points: kDevice with the device's ordinal, kPinned or kHost
  /// (ordinal -1) for host memory. Cheap enough for every feed of a run.
  struct Location {
    MemKind kind;
    int ordinal;
  };
  virtual Location Locate(const void* p) const = 0;
  /// This device's ordinal (the N of "cuda:N").
  virtual int ordinal() const = 0;
  /// True when 16-bit float convolutions run faster channels-last here (the
  /// session then runs passes/layout_nhwc.cc after the mixed-precision pass).
  virtual bool ChannelsLastHalfConvs() const { return false; }
  /// True when integer convolutions (kaiwu QLinearFused) run channels-last here
  /// (the session then runs ConvertQLinearConvsToNhwc, passes/layout_nhwc.h).
  virtual bool ChannelsLastInt8Convs() const { return false; }

  /// Pools of equal-sized device blocks for results handed to callers.
  class ResultPool {
   public:
    virtual ~ResultPool() = default;
    virtual std::shared_ptr<ResultBlock> Acquire() = 0;
  };
  virtual std::shared_ptr<ResultPool> NewResultPool(size_t bytes) const = 0;

  /// One run at a time: a stream, staging buffers in page-locked host memory
  /// and the kernels' DeviceContext. A plan keeps one per concurrent run.
  class Stream {
   public:
    virtual ~Stream() = default;
    /// What kernels receive as KernelIO::device.
    virtual const void* kernel_context() const = 0;
    /// Names the step about to be launched, for errors kernels report.
    virtual void SetStep(int step) = 0;
    /// Starts a run: counts its copies in `io.counters` (may be null), waits
    /// for the caller streams `io.wait` and the readers of `io.result_block`,
    /// and remembers `io.signal_stream` for Finish. `io` outlives the run.
    virtual void Begin(const DeviceRunIO* io) = 0;
    /// Queues a copy into device memory from memory of kind `src_kind`; `src`
    /// may be reused once this returns when kHost, once Finish returns otherwise.
    /// `recorded`: a staged (kHost) copy may be deferred into the run's
    /// recording (one copy of the whole staging; see QueueDeviceCopy).
    virtual void CopyIn(void* device_dst, const void* src, size_t bytes,
                        MemKind src_kind = MemKind::kHost, bool recorded = false) = 0;
    /// Queues a copy out of device memory; `dst` is written when Finish returns.
    virtual void CopyOut(void* dst, const void* device_src, size_t bytes,
                         MemKind dst_kind = MemKind::kHost) = 0;
    /// Waits (on this stream's own event, never the whole device) for
    /// everything queued, after making the signal stream wait for it. Throws
    /// kRuntime if a launch failed or a kernel reported bad data;
    /// `describe_step` names the step's node. Ends the run Begin started.
    virtual void Finish(const std::function<std::string(int)>& describe_step) = 0;

    // Replay of recorded launches (CUDA graphs): one launch instead of one per
    // kernel. A recording is keyed by the device addresses its launches read
    // beyond the plan's own buffers (the weights' device copies): equal keys
    // mean equal launches.
    /// Launches the recording for `key`; false if there is none.
    virtual bool Replay(const std::vector<const void*>& key) = 0;
    /// A device-to-device feed (`out` false) or result (`out` true) copy made
    /// part of the run's recording: queued before Replay / BeginRecord, it is
    /// recorded as one launch per direction that reads this run's pointers.
    /// False when this stream does not queue it (then CopyIn / CopyOut it).
    virtual bool QueueDeviceCopy(bool /*out*/, void* /*dst*/, const void* /*src*/, size_t /*bytes*/) {
      return false;
    }
    /// A result for host memory `dst` (not page-locked) gathered by the
    /// recording into one device-to-host copy of the run's staging, queued
    /// like QueueDeviceCopy; `dst` is written when Finish returns. False when
    /// not queued (then CopyOut it).
    virtual bool QueueHostResult(void* /*dst*/, const void* /*device_src*/, size_t /*bytes*/) { return false; }
    /// Launches the queued copies of one direction directly, when neither a
    /// replay nor a kept recording ran them (before / after launching the steps).
    virtual void FlushQueuedCopies(bool /*out*/) {}
    /// Starts recording the launches that follow; false when recording is
    /// off (then launch directly).
    virtual bool BeginRecord() = 0;
    /// Ends the recording. With `ok`, keeps it under `key` and launches it.
    /// Returns false when nothing ran (`ok` false because a launch threw, or
    /// the recording failed): recording is then off for this stream, and the
    /// caller launches directly.
    virtual bool EndRecord(const std::vector<const void*>& key, bool ok) = 0;

    // Weight refits: copies queued in order with the launches, no staging.
    /// What is queued next waits for the work queued so far on `stream`, a
    /// stream of the same device made elsewhere (cudaStream_t as an integer;
    /// 0 is the legacy default stream), with an event: the host does not wait.
    virtual void WaitFor(uintptr_t stream) = 0;
    /// Queues a copy from page-locked host memory (AllocPinned).
    virtual void CopyInPinned(void* device_dst, const void* pinned, size_t bytes) = 0;
    /// Queues a copy into page-locked host memory, written when Finish returns.
    virtual void CopyOutPinned(void* pinned, const void* device_src, size_t bytes) = 0;
    /// Queues element copies within device memory, all of them in one launch.
    /// The job table goes with the launch itself when it is small enough,
    /// unless `table_in_memory` (then it is copied to the device before it).
    virtual void CopyElements(const std::vector<DeviceCopyJob>& jobs, bool table_in_memory) = 0;
    /// After Finish: whether a job with `check` met NaN or Inf since the last
    /// call, and then the first such (by tag, then index) as its tag and the
    /// element's index in the job's source.
    virtual bool TakeCopyFault(int* tag, int64_t* index) = 0;
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
