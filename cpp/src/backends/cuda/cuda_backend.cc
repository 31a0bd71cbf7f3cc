// The CUDA backend's streams and staging (DeviceBackend for CUDA), the copies
// in and out of a run (pageable, page-locked or device memory; counted), the
// caller-stream ordering with events, the replay of a plan's launches as CUDA
// graphs, and a refit's weight copies. Pinned memory and result blocks: memory.cc.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/dnn.h"
#include "backends/cuda/gemm_lt.h"
#include "backends/cuda/memory.h"
#include "backends/cuda/run_copy.h"
#include "backends/cuda/weight_copy.h"
#include "backends/device.h"

namespace kaiwu {
namespace cuda {

namespace {

class Device;

// Page-locked host memory (staging for copies in and out).
struct PinnedBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit PinnedBuffer(size_t n) : bytes(n) {
    if (n) CheckCuda(cudaMallocHost(&ptr, n), "cudaMallocHost (staging)");
  }
  ~PinnedBuffer() {
    if (ptr) cudaFreeHost(ptr);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
};

class CudaStream final : public DeviceBackend::Stream {
 public:
  CudaStream(int ordinal, size_t in_bytes, size_t out_bytes, uint32_t needs)
      : ordinal_(ordinal), in_(in_bytes), out_(out_bytes) {
    CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
    CheckCuda(cudaStreamCreateWithFlags(&ctx_.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    // A blocking-sync event: waiting threads sleep instead of spinning a core.
    CheckCuda(cudaEventCreateWithFlags(&done_, cudaEventBlockingSync | cudaEventDisableTiming),
              "cudaEventCreate");
    CheckBlas(cublasCreate(&ctx_.blas), "cublasCreate");
    CheckBlas(cublasSetStream(ctx_.blas, ctx_.stream), "cublasSetStream");
    CheckBlas(cublasSetMathMode(ctx_.blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    // cuBLAS's own workspace, so that no call allocates (and graphs can record it).
    CheckCuda(cudaMalloc(&blas_workspace_, kBlasWorkspaceBytes), "cudaMalloc (cuBLAS workspace)");
    CheckBlas(cublasSetWorkspace(ctx_.blas, blas_workspace_, kBlasWorkspaceBytes), "cublasSetWorkspace");
    // cuBLASLt's matmuls (gemm_lt.h) share it: everything on one stream runs in order.
    ctx_.lt = CreateLtHandle();
    ctx_.workspace = blas_workspace_;
    ctx_.workspace_bytes = kBlasWorkspaceBytes;
    if (needs & kNeedDnnHandle) ctx_.dnn = CreateDnnHandle(ctx_.stream);
    const char* env = std::getenv("KAIWU_CUDA_GRAPHS");
    graphs_on_ = !(env && std::string(env) == "0");
    if (const char* spin = std::getenv("KAIWU_CUDA_SPIN_US")) spin_us_ = std::atoi(spin);
    // The error flag lives in mapped page-locked memory: kernels write it over
    // PCIe (only when they find bad data) and the host reads it after the run's
    // event, with no copy queued per run.
    CheckCuda(cudaHostAlloc(&flag_, sizeof(int), cudaHostAllocMapped), "cudaHostAlloc (error flag)");
    *static_cast<volatile int*>(flag_) = 0;
    void* flag_device = nullptr;
    CheckCuda(cudaHostGetDevicePointer(&flag_device, flag_, 0), "cudaHostGetDevicePointer (error flag)");
    ctx_.error_flag = static_cast<int*>(flag_device);
    // The run's device feed and result copy tables: launch parameters, or
    // (KAIWU_RUN_COPY_MAPPED=1) mapped page-locked memory the copy blocks read.
    const char* mapped = std::getenv("KAIWU_RUN_COPY_MAPPED");
    copy_mapped_ = mapped && std::string(mapped) == "1";
    if (copy_mapped_) {
      void* tables = nullptr;
      CheckCuda(cudaHostAlloc(&tables, 2 * sizeof(RunCopyTable), cudaHostAllocMapped),
                "cudaHostAlloc (copy tables)");
      mapped_tables_ = static_cast<RunCopyTable*>(tables);
      copy_host_ = mapped_tables_;
      void* tables_device = nullptr;
      CheckCuda(cudaHostGetDevicePointer(&tables_device, tables, 0), "cudaHostGetDevicePointer (copy tables)");
      copy_dev_ = static_cast<const RunCopyTable*>(tables_device);
    } else {
      copy_host_ = own_tables_;
    }
  }

  // Refit copies.
  void WaitFor(uintptr_t stream) override {
    if (!foreign_) CheckCuda(cudaEventCreateWithFlags(&foreign_, cudaEventDisableTiming), "cudaEventCreate");
    CheckCuda(cudaEventRecord(foreign_, reinterpret_cast<cudaStream_t>(stream)),
              "recording an event on the weights' producer stream");
    CheckCuda(cudaStreamWaitEvent(ctx_.stream, foreign_, 0), "waiting for the weights' producer stream");
  }

  void CopyInPinned(void* device_dst, const void* pinned, size_t bytes) override {
    if (bytes == 0) return;
    CheckCuda(cudaMemcpyAsync(device_dst, pinned, bytes, cudaMemcpyHostToDevice, ctx_.stream),
              "copy to device (weights)");
  }

  void CopyOutPinned(void* pinned, const void* device_src, size_t bytes) override {
    if (bytes == 0) return;
    CheckCuda(cudaMemcpyAsync(pinned, device_src, bytes, cudaMemcpyDeviceToHost, ctx_.stream),
              "copy to host (weights)");
  }

  void CopyElements(const std::vector<DeviceCopyJob>& jobs, bool table_in_memory) override {
    if (jobs.empty()) return;
    const size_t n = jobs.size();
    EnsureCopyFault();
    for (const DeviceCopyJob& j : jobs) fault_checked_ = fault_checked_ || j.check != 0;
    if (!table_in_memory && n <= static_cast<size_t>(kMaxParamJobs)) {
      // The jobs in the launch's parameters: nothing queued before the kernel.
      by_value_jobs_.resize(n);
      by_value_first_.resize(n + 1);
      int64_t blocks = 0;
      for (size_t i = 0; i < n; ++i) {
        const DeviceCopyJob& j = jobs[i];
        by_value_jobs_[i] = CopyJob{j.dst, j.src, j.src_offset, j.rows, j.cols, j.row_stride,
                                    j.col_stride, j.elem_size, j.check, j.tag, 0};
        by_value_first_[i] = blocks;
        blocks += (j.rows * j.cols + kCopyChunkByValue - 1) / kCopyChunkByValue;
      }
      by_value_first_[n] = blocks;
      LaunchCopyJobsByValue(by_value_jobs_.data(), by_value_first_.data(), static_cast<int>(n), blocks,
                            static_cast<unsigned long long*>(fault_), ctx_.stream);
      return;
    }
    const size_t job_bytes = n * sizeof(CopyJob), need = job_bytes + (n + 1) * sizeof(int64_t);
    const size_t rounded = (need + 255) / 256 * 256;
    if (job_used_ + rounded > job_capacity_) {
      // Grow once the copies already queued have read the old tables.
      CheckCuda(cudaStreamSynchronize(ctx_.stream), "weight copies");
      job_used_ = 0;
      job_capacity_ = std::max(rounded, 2 * job_capacity_);
      job_stage_ = std::make_unique<PinnedBuffer>(job_capacity_);
      if (job_device_) cudaFree(job_device_);
      job_device_ = nullptr;
      CheckCuda(cudaMalloc(&job_device_, job_capacity_), "cudaMalloc (weight copy jobs)");
    }
    char* stage = static_cast<char*>(job_stage_->ptr) + job_used_;
    CopyJob* out = reinterpret_cast<CopyJob*>(stage);
    int64_t* first = reinterpret_cast<int64_t*>(stage + job_bytes);
    int64_t blocks = 0;
    for (size_t i = 0; i < n; ++i) {
      const DeviceCopyJob& j = jobs[i];
      out[i] = CopyJob{j.dst, j.src, j.src_offset, j.rows, j.cols, j.row_stride, j.col_stride,
                       j.elem_size, j.check, j.tag, 0};
      first[i] = blocks;
      blocks += (j.rows * j.cols + kCopyChunk - 1) / kCopyChunk;
    }
    first[n] = blocks;
    char* dev = static_cast<char*>(job_device_) + job_used_;
    CheckCuda(cudaMemcpyAsync(dev, stage, need, cudaMemcpyHostToDevice, ctx_.stream),
              "copy to device (weight copy jobs)");
    LaunchCopyJobs(reinterpret_cast<const CopyJob*>(dev),
                   reinterpret_cast<const int64_t*>(dev + job_bytes), static_cast<int>(n), blocks,
                   static_cast<unsigned long long*>(fault_), ctx_.stream);
    job_used_ += rounded;
  }

  void EnsureCopyFault() {
    if (fault_) return;
    CheckCuda(cudaMalloc(&fault_, sizeof(unsigned long long)), "cudaMalloc (copy fault)");
    CheckCuda(cudaMemsetAsync(fault_, 0xff, sizeof(unsigned long long), ctx_.stream), "cudaMemset");
    fault_host_ = std::make_unique<PinnedBuffer>(sizeof(unsigned long long));
  }

  bool TakeCopyFault(int* tag, int64_t* index) override {
    if (!fault_) return false;
    auto* host = static_cast<unsigned long long*>(fault_host_->ptr);
    if (fault_read_) {
      fault_read_ = false;  // Finish queued the read before its event: *host is current
    } else {
      CheckCuda(cudaMemcpyAsync(host, fault_, sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                                ctx_.stream), "copy to host (copy fault)");
      CheckCuda(cudaStreamSynchronize(ctx_.stream), "weight copies");
    }
    const unsigned long long f = *host;
    if (f == ~0ull) return false;
    CheckCuda(cudaMemsetAsync(fault_, 0xff, sizeof(unsigned long long), ctx_.stream), "cudaMemset");
    CheckCuda(cudaStreamSynchronize(ctx_.stream), "weight copies");
    *tag = static_cast<int>(f >> 40);
    *index = static_cast<int64_t>(f & ((1ull << 40) - 1));
    return true;
  }
  ~CudaStream() override {
    cudaSetDevice(ordinal_);
    cudaStreamSynchronize(ctx_.stream);
    for (cudaEvent_t e : wait_events_) cudaEventDestroy(e);
    for (Graph& g : graphs_) DestroyGraph(g);
    if (ctx_.blas) cublasDestroy(ctx_.blas);
    DestroyDnnHandle(ctx_.dnn);
    DestroyLtHandle(ctx_.lt);
    cudaFree(blas_workspace_);
    cudaEventDestroy(done_);
    cudaStreamDestroy(ctx_.stream);
    cudaFreeHost(flag_);
    if (mapped_tables_) cudaFreeHost(mapped_tables_);
    if (in_mirror_) cudaFree(in_mirror_);
    if (out_mirror_) cudaFree(out_mirror_);
    if (job_device_) cudaFree(job_device_);
    if (fault_) cudaFree(fault_);
    if (foreign_) cudaEventDestroy(foreign_);
  }

  const void* kernel_context() const override { return &ctx_; }
  void SetStep(int step) override { ctx_.step = step; }

  void Begin(const DeviceRunIO* io) override {
    io_ = io;
    counters_ = io ? io->counters : nullptr;
    if (counters_) IoCounters::Add(counters_->runs, 1);
    if (!io) return;
    // The caller's work queued so far on its streams comes first: an event on
    // each, waited for on this stream (the host does not wait).
    while (static_cast<int>(wait_events_.size()) < io->num_wait) {
      cudaEvent_t e = nullptr;
      CheckCuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
      wait_events_.push_back(e);
    }
    for (int i = 0; i < io->num_wait; ++i) {
      auto caller = reinterpret_cast<cudaStream_t>(io->wait[i]);
      CheckCuda(cudaEventRecord(wait_events_[i], caller), "recording an event on the caller's stream");
      CheckCuda(cudaStreamWaitEvent(ctx_.stream, wait_events_[i], 0), "waiting for the caller's stream");
    }
    if (counters_) IoCounters::Add(counters_->stream_waits, static_cast<uint64_t>(io->num_wait));
    if (io->result_block) WaitForReaders(io->result_block, ctx_.stream);
  }

  void CopyIn(void* device_dst, const void* src, size_t bytes, MemKind kind, bool recorded) override {
    if (bytes == 0) return;
    if (kind == MemKind::kDevice) {
      CheckCuda(cudaMemcpyAsync(device_dst, src, bytes, cudaMemcpyDefault, ctx_.stream),
                "device-to-device copy of a feed");
      Count(&IoCounters::d2d_copies, &IoCounters::d2d_bytes, bytes);
      return;
    }
    if (kind == MemKind::kPinned) {
      // Page-locked already: one DMA straight from the caller's buffer.
      CheckCuda(cudaMemcpyAsync(device_dst, src, bytes, cudaMemcpyHostToDevice, ctx_.stream),
                "copy to device");
      Count(&IoCounters::h2d_copies, &IoCounters::h2d_bytes, bytes);
      return;
    }
    if (in_used_ + bytes > in_.bytes)
      Fail(StatusCode::kInternal, "CUDA staging (in) overflow: ", in_used_ + bytes, " > ", in_.bytes);
    char* stage = static_cast<char*>(in_.ptr) + in_used_;
    std::memcpy(stage, src, bytes);
    // Recorded runs: one copy of the whole staging to its device mirror, then
    // the recording's copy launch moves each feed into place.
    if (recorded && graphs_on_ && copy_n_[0] < kMaxRunCopies && in_used_ == in_mirror_end_ &&
        EnsureMirrors()) {
      copy_host_[0].jobs[copy_n_[0]++] = FlatCopy{device_dst, static_cast<char*>(in_mirror_) + in_used_,
                                                  static_cast<int64_t>(bytes)};
      copy_max_[0] = std::max(copy_max_[0], static_cast<int64_t>(bytes));
      in_used_ += DeviceBackend::StagingBytes(bytes);
      in_mirror_end_ = in_used_;
    } else {
      CheckCuda(cudaMemcpyAsync(device_dst, stage, bytes, cudaMemcpyHostToDevice, ctx_.stream),
                "copy to device");
      in_used_ += DeviceBackend::StagingBytes(bytes);
    }
    Count(&IoCounters::staging_copies, &IoCounters::staging_bytes, bytes);
    Count(&IoCounters::h2d_copies, &IoCounters::h2d_bytes, bytes);
  }

  void CopyOut(void* dst, const void* device_src, size_t bytes, MemKind kind) override {
    if (bytes == 0) return;
    if (kind == MemKind::kDevice) {
      CheckCuda(cudaMemcpyAsync(dst, device_src, bytes, cudaMemcpyDefault, ctx_.stream),
                "device-to-device copy of a result");
      Count(&IoCounters::d2d_copies, &IoCounters::d2d_bytes, bytes);
      return;
    }
    if (kind == MemKind::kPinned) {
      CheckCuda(cudaMemcpyAsync(dst, device_src, bytes, cudaMemcpyDeviceToHost, ctx_.stream),
                "copy to host");
      Count(&IoCounters::d2h_copies, &IoCounters::d2h_bytes, bytes);
      return;
    }
    if (out_used_ + bytes > out_.bytes)
      Fail(StatusCode::kInternal, "CUDA staging (out) overflow: ", out_used_ + bytes, " > ",
           out_.bytes);
    char* stage = static_cast<char*>(out_.ptr) + out_used_;
    CheckCuda(cudaMemcpyAsync(stage, device_src, bytes, cudaMemcpyDeviceToHost, ctx_.stream),
              "copy to host");
    pending_.push_back(Pending{dst, stage, bytes});
    out_used_ += DeviceBackend::StagingBytes(bytes);
    Count(&IoCounters::d2h_copies, &IoCounters::d2h_bytes, bytes);
  }

  void Finish(const std::function<std::string(int)>& describe_step) override {
    volatile int* flag_host = static_cast<volatile int*>(flag_);
    const DeviceRunIO* io = io_;
    IoCounters* counters = counters_;
    io_ = nullptr;
    counters_ = nullptr;
    cudaError_t launch = cudaGetLastError();
    if (out_mirror_end_ > 0 && launch == cudaSuccess)
      launch = cudaMemcpyAsync(out_.ptr, out_mirror_, out_mirror_end_, cudaMemcpyDeviceToHost, ctx_.stream);
    // Checked weight copies: their fault word comes back with this wait (no
    // second synchronization in TakeCopyFault).
    fault_read_ = false;
    if (fault_checked_ && launch == cudaSuccess) {
      launch = cudaMemcpyAsync(fault_host_->ptr, fault_, sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                               ctx_.stream);
      fault_read_ = launch == cudaSuccess;
    }
    fault_checked_ = false;
    cudaError_t rec = cudaEventRecord(done_, ctx_.stream);
    // The caller's later work on its stream starts after the run (an event
    // wait on the device, queued before the host waits below).
    cudaError_t signal = cudaSuccess;
    if (io && io->signal && rec == cudaSuccess) {
      signal = cudaStreamWaitEvent(reinterpret_cast<cudaStream_t>(io->signal_stream), done_, 0);
      if (counters) IoCounters::Add(counters->stream_signals, 1);
    }
    if (counters) IoCounters::Add(counters->status_reads, 1);
    cudaError_t sync = Wait();
    in_used_ = out_used_ = 0;
    job_used_ = 0;
    copy_n_[0] = copy_n_[1] = 0;
    copy_max_[0] = copy_max_[1] = 0;
    copies_ran_ = false;
    in_mirror_end_ = out_mirror_end_ = 0;
    staging_sent_ = false;
    struct Clear {
      std::vector<Pending>& v;
      ~Clear() { v.clear(); }
    } clear{pending_};
    for (cudaError_t e : {launch, rec, signal, sync})
      if (e != cudaSuccess) CheckCuda(e, "running the plan");
    if (int step = *flag_host) {
      *flag_host = 0;  // the stream is idle: nothing writes it now
      Fail(StatusCode::kRuntime, describe_step(step - 1),
           ": found bad data on the device (e.g. an index out of range)");
    }
    for (const Pending& p : pending_) std::memcpy(p.host, p.stage, p.bytes);
    if (counters && !pending_.empty()) {
      size_t bytes = 0;
      for (const Pending& p : pending_) bytes += p.bytes;
      IoCounters::Add(counters->staging_copies, pending_.size());
      IoCounters::Add(counters->staging_bytes, bytes);
    }
  }

  bool QueueDeviceCopy(bool out, void* dst, const void* src, size_t bytes) override {
    if (!graphs_on_) return false;
    if (bytes == 0) return true;
    const int d = out ? 1 : 0;
    if (copy_n_[d] >= kMaxRunCopies) return false;
    copy_host_[d].jobs[copy_n_[d]++] = FlatCopy{dst, src, static_cast<int64_t>(bytes)};
    copy_max_[d] = std::max(copy_max_[d], static_cast<int64_t>(bytes));
    Count(&IoCounters::d2d_copies, &IoCounters::d2d_bytes, bytes);
    return true;
  }

  bool QueueHostResult(void* dst, const void* src, size_t bytes) override {
    if (!graphs_on_) return false;
    if (bytes == 0) return true;
    if (copy_n_[1] >= kMaxRunCopies || out_used_ != out_mirror_end_ || out_used_ + bytes > out_.bytes ||
        !EnsureMirrors())
      return false;
    char* stage = static_cast<char*>(out_.ptr) + out_used_;
    copy_host_[1].jobs[copy_n_[1]++] =
        FlatCopy{static_cast<char*>(out_mirror_) + out_used_, src, static_cast<int64_t>(bytes)};
    copy_max_[1] = std::max(copy_max_[1], static_cast<int64_t>(bytes));
    pending_.push_back(Pending{dst, stage, bytes});
    out_used_ += DeviceBackend::StagingBytes(bytes);
    out_mirror_end_ = out_used_;
    Count(&IoCounters::d2h_copies, &IoCounters::d2h_bytes, bytes);
    return true;
  }

  void FlushQueuedCopies(bool out) override {
    const int d = out ? 1 : 0;
    if (!out) SendStaging();
    if (copies_ran_ || copy_n_[d] == 0) return;
    LaunchCopies(d);
  }

  bool Replay(const std::vector<const void*>& key) override {
    const CopySig sig = Sig();
    SendStaging();
    for (Graph& g : graphs_) {
      if (g.key != key || g.sig != sig) continue;
      g.last_use = ++clock_;
      if (copy_mapped_) {
        std::atomic_thread_fence(std::memory_order_seq_cst);  // the copy tables before the launch
      } else {
        // This run's copy tables into the recorded copy nodes, where they changed.
        for (int d = 0; d < 2; ++d) {
          const size_t n = static_cast<size_t>(copy_n_[d]);
          if (n == 0 || std::memcmp(g.tables[d].jobs, copy_host_[d].jobs, n * sizeof(FlatCopy)) == 0) continue;
          CheckCuda(SetRunCopies(g.exec, g.copy_nodes[d], copy_host_[d], static_cast<int>(n),
                                 RunCopyBlocks(copy_max_[d])),
                    "cudaGraphExecKernelNodeSetParams (feed/result copies)");
          std::memcpy(g.tables[d].jobs, copy_host_[d].jobs, n * sizeof(FlatCopy));
          if (counters_) IoCounters::Add(counters_->graph_updates, 1);
        }
      }
      CheckCuda(cudaGraphLaunch(g.exec, ctx_.stream), "cudaGraphLaunch");
      CountLaunch(g.nodes);
      copies_ran_ = true;
      return true;
    }
    return false;
  }

  bool BeginRecord() override {
    if (!graphs_on_) return false;
    SendStaging();
    if (cudaStreamBeginCapture(ctx_.stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      cudaGetLastError();
      graphs_on_ = false;
      return false;
    }
    // The queued feed copies first (a replay sets their table to its run's).
    recorded_copies_[0] = recorded_copies_[1] = nullptr;
    if (copy_n_[0]) LaunchRunCopiesNoThrow(0);
    return true;
  }

  bool EndRecord(const std::vector<const void*>& key, bool ok) override {
    if (ok && copy_n_[1]) ok = LaunchRunCopiesNoThrow(1);
    cudaGraph_t graph = nullptr;
    cudaError_t err = cudaStreamEndCapture(ctx_.stream, &graph);
    cudaGraphExec_t exec = nullptr;
    size_t nodes = 0;
    const cudaGraphNode_t copy_nodes[2] = {recorded_copies_[0], recorded_copies_[1]};
    recorded_copies_[0] = recorded_copies_[1] = nullptr;
    // Each queued direction's copies must be a node that a replay can update.
    for (int d = 0; d < 2; ++d)
      if (!copy_mapped_ && copy_n_[d] && !copy_nodes[d]) ok = false;
    if (ok && err == cudaSuccess && graph) {
      err = cudaGraphGetNodes(graph, nullptr, &nodes);
      if (err == cudaSuccess) DumpGraph(graph);
      if (err == cudaSuccess) err = cudaGraphInstantiate(&exec, graph, 0);
    }
    if (!ok || err != cudaSuccess || !exec) {
      // Something in the plan cannot be recorded: run this stream's plans directly.
      if (exec) cudaGraphExecDestroy(exec);
      if (graph) cudaGraphDestroy(graph);
      cudaGetLastError();
      graphs_on_ = false;
      return false;
    }
    if (graphs_.size() >= kMaxGraphs) {
      auto lru = graphs_.begin();
      for (auto it = graphs_.begin(); it != graphs_.end(); ++it)
        if (it->last_use < lru->last_use) lru = it;
      DestroyGraph(*lru);
      graphs_.erase(lru);
    }
    // The graph stays (its copy nodes name the exec's); the tables as recorded.
    Graph g{key, Sig(), exec, graph, {copy_nodes[0], copy_nodes[1]}, {}, ++clock_, nodes};
    for (int d = 0; d < 2; ++d)
      std::memcpy(g.tables[d].jobs, copy_host_[d].jobs, static_cast<size_t>(copy_n_[d]) * sizeof(FlatCopy));
    graphs_.push_back(std::move(g));
    std::atomic_thread_fence(std::memory_order_seq_cst);
    CheckCuda(cudaGraphLaunch(exec, ctx_.stream), "cudaGraphLaunch");
    CountLaunch(nodes);
    copies_ran_ = true;
    return true;
  }

 private:
  // The run's event: polled for up to spin_us_ (a short run is over before a
  // sleeping thread could be woken), then waited for asleep (a long one does
  // not hold a core).
  cudaError_t Wait() {
    if (spin_us_ > 0) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
      do {
        cudaError_t q = cudaEventQuery(done_);
        if (q != cudaErrorNotReady) return q;
      } while (std::chrono::steady_clock::now() < until);
    }
    return cudaEventSynchronize(done_);
  }
  struct Pending {
    void* host;
    const void* stage;
    size_t bytes;
  };
  void Count(std::atomic<uint64_t> IoCounters::*copies, std::atomic<uint64_t> IoCounters::*bytes,
             size_t n) {
    if (!counters_) return;
    IoCounters::Add(counters_->*copies, 1);
    IoCounters::Add(counters_->*bytes, n);
  }
  // What a recording's copy launches are: copies and blocks per direction.
  using CopySig = std::array<int64_t, 4>;
  CopySig Sig() const {
    return {copy_n_[0], copy_n_[0] ? RunCopyBlocks(copy_max_[0]) : 0, copy_n_[1],
            copy_n_[1] ? RunCopyBlocks(copy_max_[1]) : 0};
  }
  // The staged feeds' one host-to-device copy into the mirror (once per run).
  void SendStaging() {
    if (staging_sent_ || in_mirror_end_ == 0) return;
    CheckCuda(cudaMemcpyAsync(in_mirror_, in_.ptr, in_mirror_end_, cudaMemcpyHostToDevice, ctx_.stream),
              "copy to device");
    staging_sent_ = true;
  }
  // Device mirrors of the staging buffers (allocated at first use).
  bool EnsureMirrors() {
    if (mirrors_ok_) return true;
    // Without them (no device memory) copies stay one call each.
    if (in_.bytes && !in_mirror_ && cudaMalloc(&in_mirror_, in_.bytes) != cudaSuccess) {
      in_mirror_ = nullptr;
      cudaGetLastError();
      return false;
    }
    if (out_.bytes && !out_mirror_ && cudaMalloc(&out_mirror_, out_.bytes) != cudaSuccess) {
      out_mirror_ = nullptr;
      cudaGetLastError();
      return false;
    }
    mirrors_ok_ = true;
    return true;
  }
  // The run's queued copies one way as one launch (its table as parameters, or in mapped memory).
  void LaunchCopies(int d) {
    const unsigned blocks = RunCopyBlocks(copy_max_[d]);
    const int n = static_cast<int>(copy_n_[d]);
    if (copy_mapped_) {
      std::atomic_thread_fence(std::memory_order_seq_cst);  // the table before the launch
      LaunchRunCopiesMapped(copy_dev_ + d, n, blocks, ctx_.stream);
    } else {
      LaunchRunCopies(copy_host_[d], n, blocks, ctx_.stream);
    }
  }
  // A copy launch while recording, its node kept for replays to update: false
  // (no throw) when it could not be queued.
  bool LaunchRunCopiesNoThrow(int d) {
    try {
      LaunchCopies(d);
      if (!copy_mapped_ && LastCapturedNode(ctx_.stream, &recorded_copies_[d]) != cudaSuccess) {
        cudaGetLastError();
        return false;
      }
      return true;
    } catch (const Error&) {
      return false;
    }
  }
  struct Graph {
    std::vector<const void*> key;
    CopySig sig;
    cudaGraphExec_t exec;
    cudaGraph_t graph;                 // kept: copy_nodes belong to it
    cudaGraphNode_t copy_nodes[2];     // the feed [0] and result [1] copy launches (or null)
    RunCopyTable tables[2];            // their parameters as last set (the first copy_n_ jobs)
    uint64_t last_use;
    size_t nodes;  // kernel and copy nodes recorded
  };
  static void DestroyGraph(Graph& g) {
    cudaGraphExecDestroy(g.exec);
    if (g.graph) cudaGraphDestroy(g.graph);
  }
  void CountLaunch(size_t nodes) {
    if (!counters_) return;
    IoCounters::Add(counters_->graph_launches, 1);
    IoCounters::Add(counters_->graph_nodes, nodes);
  }
  // KAIWU_CUDA_GRAPH_DOT=prefix: each recording as Graphviz text, prefix<N>.dot
  // (cudaGraphDebugDotPrint: node kinds and kernel names), for bench/profile_cuda_run.py.
  static void DumpGraph(cudaGraph_t graph) {
    static std::atomic<int> count{0};
    const char* prefix = std::getenv("KAIWU_CUDA_GRAPH_DOT");
    if (!prefix || !*prefix) return;
    const std::string path = std::string(prefix) + std::to_string(count++) + ".dot";
    if (cudaGraphDebugDotPrint(graph, path.c_str(), cudaGraphDebugDotFlagsKernelNodeParams) != cudaSuccess)
      cudaGetLastError();  // a listing for reading only: a failure changes nothing
  }
  static constexpr size_t kMaxGraphs = 4;              // weight versions recorded per stream

  int ordinal_;
  DeviceContext ctx_;
  cudaEvent_t done_ = nullptr;
  void* flag_ = nullptr;  // int in mapped page-locked memory (host address)
  PinnedBuffer in_, out_;
  size_t in_used_ = 0, out_used_ = 0;
  std::vector<Pending> pending_;
  const DeviceRunIO* io_ = nullptr;  // the run between Begin and Finish
  IoCounters* counters_ = nullptr;
  std::vector<cudaEvent_t> wait_events_;  // one per caller stream waited for
  void* blas_workspace_ = nullptr;
  bool graphs_on_ = true;
  int spin_us_ = 200;  // KAIWU_CUDA_SPIN_US
  std::vector<Graph> graphs_;
  uint64_t clock_ = 0;
  // This run's queued device feed [0] and result [1] copies (QueueDeviceCopy).
  RunCopyTable own_tables_[2];                // launch parameters (the default)
  bool copy_mapped_ = false;                  // KAIWU_RUN_COPY_MAPPED=1
  RunCopyTable* mapped_tables_ = nullptr;     // then: two tables in mapped page-locked memory
  const RunCopyTable* copy_dev_ = nullptr;    // and their device address
  RunCopyTable* copy_host_ = nullptr;         // the tables this run fills (one of the two)
  cudaGraphNode_t recorded_copies_[2] = {nullptr, nullptr};  // the recording's copy launches
  int64_t copy_n_[2] = {0, 0}, copy_max_[2] = {0, 0};
  bool copies_ran_ = false;  // a replay or a kept recording ran them
  // Device mirrors of the staging buffers: staged feeds [0, in_mirror_end_)
  // go over in one copy; queued host results [0, out_mirror_end_) come back in one.
  void* in_mirror_ = nullptr;
  void* out_mirror_ = nullptr;
  bool mirrors_ok_ = false;
  size_t in_mirror_end_ = 0, out_mirror_end_ = 0;
  bool staging_sent_ = false;
  // Refit copies: job tables (staged, then on the device), used since the last Finish.
  std::unique_ptr<PinnedBuffer> job_stage_;
  void* job_device_ = nullptr;
  size_t job_capacity_ = 0, job_used_ = 0;
  std::vector<CopyJob> by_value_jobs_;  // a launch's jobs before they go into its parameters
  std::vector<int64_t> by_value_first_;
  void* fault_ = nullptr;  // unsigned long long: the lowest (tag << 40 | index) found, or ~0
  bool fault_checked_ = false;  // a checked copy is queued: Finish reads the fault word back
  bool fault_read_ = false;     // the last Finish read it into fault_host_
  std::unique_ptr<PinnedBuffer> fault_host_;
  cudaEvent_t foreign_ = nullptr;  // marks a producer stream's work (WaitFor)
};

class Device final : public DeviceBackend {
 public:
  explicit Device(int ordinal) : ordinal_(ordinal) {
    CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
    cudaDeviceProp prop{};
    CheckCuda(cudaGetDeviceProperties(&prop, ordinal_), "cudaGetDeviceProperties");
    name_ = "cuda:" + std::to_string(ordinal_) + " (" + prop.name + ")";
  }
  std::string name() const override { return name_; }
  const char* backend() const override { return "CUDA"; }
  const KernelRegistry& kernels() const override { return CudaKernels(); }
  void MakeCurrent() const override { CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice"); }

  std::shared_ptr<void> Alloc(size_t bytes) const override {
    CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
    void* p = nullptr;
    CheckCuda(cudaMalloc(&p, bytes ? bytes : 256), "cudaMalloc");
    const int ordinal = ordinal_;
    return std::shared_ptr<void>(p, [ordinal](void* q) {
      cudaSetDevice(ordinal);
      cudaFree(q);
    });
  }

  std::shared_ptr<void> Upload(const void* host, size_t bytes) const override {
    std::shared_ptr<void> d = Alloc(bytes);
    if (bytes) CheckCuda(cudaMemcpy(d.get(), host, bytes, cudaMemcpyHostToDevice), "upload");
    return d;
  }

  void Download(void* host, const void* device_src, size_t bytes) const override {
    CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
    if (bytes) CheckCuda(cudaMemcpy(host, device_src, bytes, cudaMemcpyDefault), "download");
  }
  std::shared_ptr<void> AllocPinned(size_t bytes) const override {
    return cuda::AllocPinned(ordinal_, bytes);
  }
  Location Locate(const void* p) const override { return cuda::Locate(p); }
  int ordinal() const override { return ordinal_; }
  bool ChannelsLastHalfConvs() const override { return DnnChannelsLast(); }
  // The integer conv kernel reads channels-last rows in 16-byte pieces
  // (backends/cuda/quant_fused.cu); KAIWU_INT8_NHWC=0 keeps NCHW (A/B switch).
  bool ChannelsLastInt8Convs() const override {
    const char* v = std::getenv("KAIWU_INT8_NHWC");
    return !(v && std::string(v) == "0");
  }
  std::shared_ptr<ResultPool> NewResultPool(size_t bytes) const override {
    return cuda::NewResultPool(ordinal_, bytes);
  }

  std::unique_ptr<Stream> NewStream(size_t in_bytes, size_t out_bytes, uint32_t needs) const override {
    return std::make_unique<CudaStream>(ordinal_, in_bytes, out_bytes, needs);
  }

 private:
  int ordinal_;
  std::string name_;
};

}  // namespace

int DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

const DeviceBackend* GetBackend(int ordinal) {
  static std::mutex mu;
  static std::vector<std::unique_ptr<Device>> devices;
  std::lock_guard<std::mutex> lock(mu);
  const int count = DeviceCount();
  if (count == 0) Fail(StatusCode::kUnsupported, "device 'cuda': no CUDA device is present");
  if (ordinal >= count)
    Fail(StatusCode::kInput, "device 'cuda:", ordinal, "': only ", count, " CUDA device(s)");
  if (devices.empty()) devices.resize(static_cast<size_t>(count));
  if (!devices[ordinal]) devices[ordinal] = std::make_unique<Device>(ordinal);
  return devices[ordinal].get();
}

}  // namespace cuda
}  // namespace kaiwu
