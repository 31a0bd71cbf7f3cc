// A device refit from host arrays: every array is copied (refit map blocks
// applied) into one page-locked staging buffer kept by the weight pool, in
// pieces on the session's threads. The staging is cut into chunks of
// consecutive pieces; the thread that copies a chunk's last piece queues its
// upload to the device staging at once, while the other threads go on
// copying, so the copy engine moves one chunk while the next ones are written
// and no thread waits at a chunk's end. One launch then copies the staged
// weights into the new version's device buffers (a device-to-device pass at
// HBM speed instead of one host-to-device copy per weight). The host copies of
// those buffers are left stale (EnsureHost downloads them when asked for).
// KAIWU_REFIT_PIPELINE=0 copies chunk by chunk instead (each a ParallelFor,
// its upload queued after it), the way refits staged before.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "core/thread_pool.h"
#include "runtime/weight_builder.h"
#include "runtime/weight_pool.h"

namespace kaiwu {

namespace {

constexpr size_t kAlign = 256;               // each weight's start in staging
constexpr int64_t kPieceElements = 1 << 14;  // what one thread copies at a time
// Pipelined chunks: about a sixteenth of the upload each, 256 KB to 2 MB (no
// thread waits at a chunk's end, so a chunk costs only its upload call).
constexpr size_t kChunkParts = 16, kMinChunk = size_t{256} << 10, kMaxChunk = size_t{2} << 20;
// KAIWU_REFIT_PIPELINE=0: a sixth each, 512 KB to 4 MB.
constexpr size_t kStepChunkParts = 6, kStepMinChunk = size_t{512} << 10,
                 kStepMaxChunk = size_t{4} << 20;
// Fewer elements than this are staged on the calling thread (as CopyPieces does).
constexpr int64_t kMinParallel = 1 << 17;

size_t Bytes(const CopyPiece& p, const std::vector<CopyTask>& tasks) {
  return static_cast<size_t>(p.block.size()) * DTypeSize(tasks[p.task].dtype);
}

// Read at every refit (a benchmark compares both in one process).
bool Pipelined() {
  const char* env = std::getenv("KAIWU_REFIT_PIPELINE");
  return !(env && std::strcmp(env, "0") == 0);
}

}  // namespace

bool WeightBuilder::StageHostWrites(WeightSet* next, const RefitOptions& options,
                                    std::vector<std::string>* problems) {
  // Where each weight goes in staging.
  stage_tasks_.clear();
  stage_write_.clear();
  stage_offset_.clear();
  size_t total = 0;
  for (size_t wi = 0; wi < writes_.size(); ++wi) {
    const Write& w = writes_[wi];
    if (w.on_device) continue;
    stage_write_.push_back(wi);
    stage_offset_.push_back(total);
    stage_tasks_.push_back(CopyTask{w.blocks, srcs_.data() + w.first_src, nullptr,
                                    statics_.dtype(w.value)});
    total += (next->buffers[w.value]->host.bytes() + kAlign - 1) / kAlign * kAlign;
  }
  if (total == 0) return true;
  trace_.Add(RefitTrace::kStagedBytes, static_cast<int64_t>(total));
  const WeightPool::Staging& staging = pool_->staging(total);
  char* host = static_cast<char*>(staging.host.get());
  char* dev = static_cast<char*>(staging.device.get());
  for (size_t k = 0; k < stage_tasks_.size(); ++k) stage_tasks_[k].dst = host + stage_offset_[k];

  SplitTasks(stage_tasks_, kPieceElements, &stage_pieces_);
  const bool pipelined = Pipelined();
  const size_t chunk = pipelined
                           ? std::min(kMaxChunk, std::max(kMinChunk, total / kChunkParts))
                           : std::min(kStepMaxChunk, std::max(kStepMinChunk, total / kStepChunkParts));
  // Chunks: consecutive pieces of about `chunk` bytes, each uploaded whole
  // (pieces follow each other in staging: a chunk is one range of it).
  const size_t n = stage_pieces_.size();
  stage_chunk_.resize(n);
  stage_ranges_.clear();
  int64_t elements = 0;
  for (size_t first = 0; first < n;) {
    size_t last = first, bytes = 0, lo = SIZE_MAX, hi = 0;
    while (last < n && (bytes < chunk || last == first)) {
      const CopyPiece& p = stage_pieces_[last];
      const size_t at = stage_offset_[p.task] + static_cast<size_t>(p.block.dst_offset) *
                                                    DTypeSize(stage_tasks_[p.task].dtype);
      lo = std::min(lo, at);
      hi = std::max(hi, at + Bytes(p, stage_tasks_));
      bytes += Bytes(p, stage_tasks_);
      elements += p.block.size();
      stage_chunk_[last] = static_cast<uint32_t>(stage_ranges_.size());
      ++last;
    }
    stage_ranges_.emplace_back(lo, hi);
    first = last;
  }
  const size_t num_chunks = stage_ranges_.size();
  DeviceBackend::Stream& stream = *stream_;
  auto fail = [&](const CopyFault& fault, size_t task) {
    const Write& w = writes_[stage_write_[task]];
    problems->push_back("'" + std::string(src_names_[w.first_src + fault.src]) +
                        "' holds a non-finite value at flat index " + std::to_string(fault.index));
    return false;
  };

  if (!pipelined) {
    for (size_t first = 0; first < n;) {
      size_t last = first;
      while (last < n && stage_chunk_[last] == stage_chunk_[first]) ++last;
      CopyFault fault;
      size_t task = 0;
      if (!CopyPieces(stage_tasks_, stage_pieces_.data() + first, last - first,
                      options.check_finite, true, &fault, &task, threads_))
        return fail(fault, task);
      const auto [lo, hi] = stage_ranges_[stage_chunk_[first]];
      stream.CopyInPinned(dev + lo, host + lo, hi - lo);
      first = last;
    }
  } else {
    if (stage_left_capacity_ < num_chunks) {  // grown only when asked for more
      stage_left_capacity_ = std::max(num_chunks, 2 * stage_left_capacity_);
      stage_left_ = std::make_unique<std::atomic<int32_t>[]>(stage_left_capacity_);
    }
    for (size_t c = 0; c < num_chunks; ++c) stage_left_[c].store(0, std::memory_order_relaxed);
    for (size_t i = 0; i < n; ++i) stage_left_[stage_chunk_[i]].fetch_add(1, std::memory_order_relaxed);
    stage_faults_.assign(n, CopyFault{});
    stage_failed_.assign(n, 0);
    std::mutex error_mu;
    std::exception_ptr error;  // an upload that failed to queue (on whichever thread)
    auto copy = [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        size_t task = 0;
        stage_failed_[i] = !CopyPieces(stage_tasks_, &stage_pieces_[i], 1, options.check_finite,
                                       true, &stage_faults_[i], &task, nullptr);
        // The piece's streaming stores are fenced: the last piece's thread
        // sees every store of the chunk before it queues the upload.
        const uint32_t c = stage_chunk_[i];
        if (stage_left_[c].fetch_sub(1, std::memory_order_acq_rel) != 1) continue;
        try {
          device_->MakeCurrent();  // a worker thread: the session's device
          stream.CopyInPinned(dev + stage_ranges_[c].first, host + stage_ranges_[c].first,
                              stage_ranges_[c].second - stage_ranges_[c].first);
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mu);
          if (!error) error = std::current_exception();
        }
      }
    };
    if (!threads_ || threads_->num_threads() < 2 || elements < kMinParallel)
      copy(0, static_cast<int64_t>(n));
    else
      threads_->ParallelFor(static_cast<int64_t>(n), static_cast<double>(kPieceElements), copy);
    if (error) std::rethrow_exception(error);
    for (size_t i = 0; i < n; ++i)
      if (stage_failed_[i]) return fail(stage_faults_[i], stage_pieces_[i].task);
  }

  // One device pass from staging into the version's buffers.
  stage_device_ = dev;
  for (size_t k = 0; k < stage_tasks_.size(); ++k) {
    stage_at_[stage_write_[k]] = stage_offset_[k];
    const Write& w = writes_[stage_write_[k]];
    WeightBuffer* b = next->buffers[w.value];
    const size_t es = DTypeSize(statics_.dtype(w.value));
    DeviceCopyJob j;
    j.dst = b->device.get();
    j.src = dev + stage_offset_[k];
    j.cols = static_cast<int64_t>(b->host.bytes() / es);
    j.row_stride = j.cols;
    j.elem_size = static_cast<int>(es);
    jobs_.push_back(j);
    b->host_current = false;
  }
  return true;
}

}  // namespace kaiwu
