// A device refit from host arrays: every array is copied (refit map blocks
// applied) into one page-locked staging buffer kept by the weight pool, in
// chunks on the session's threads; each chunk's upload to the device staging
// is queued as soon as it is written, so the copy engine moves one chunk while
// the threads write the next. One launch then copies the staged weights into
// the new version's device buffers (a device-to-device pass at HBM speed
// instead of one host-to-device copy per weight). The host copies of those
// buffers are left stale (EnsureHost downloads them when asked for).
#include <algorithm>

#include "runtime/weight_builder.h"
#include "runtime/weight_pool.h"

namespace kaiwu {

namespace {

constexpr size_t kAlign = 256;               // each weight's start in staging
constexpr int64_t kPieceElements = 1 << 14;  // what one thread copies at a time
// Chunks: about a sixth of the upload each, 512 KB to 4 MB.
constexpr size_t kChunkParts = 6, kMinChunk = size_t{512} << 10, kMaxChunk = size_t{4} << 20;

size_t Bytes(const CopyPiece& p, const std::vector<CopyTask>& tasks) {
  return static_cast<size_t>(p.block.size()) * DTypeSize(tasks[p.task].dtype);
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
  const WeightPool::Staging& staging = pool_->staging(total);
  char* host = static_cast<char*>(staging.host.get());
  char* dev = static_cast<char*>(staging.device.get());
  for (size_t k = 0; k < stage_tasks_.size(); ++k) stage_tasks_[k].dst = host + stage_offset_[k];

  // Chunks of pieces: copied on the threads, then their upload queued.
  SplitTasks(stage_tasks_, kPieceElements, &stage_pieces_);
  const size_t chunk = std::min(kMaxChunk, std::max(kMinChunk, total / kChunkParts));
  DeviceBackend::Stream& stream = *stream_;
  size_t first = 0;  // the chunk's first piece
  while (first < stage_pieces_.size()) {
    size_t last = first, bytes = 0, lo = SIZE_MAX, hi = 0;
    while (last < stage_pieces_.size() && (bytes < chunk || last == first)) {
      const CopyPiece& p = stage_pieces_[last];
      const size_t at = stage_offset_[p.task] + static_cast<size_t>(p.block.dst_offset) *
                                                    DTypeSize(stage_tasks_[p.task].dtype);
      lo = std::min(lo, at);
      hi = std::max(hi, at + Bytes(p, stage_tasks_));
      bytes += Bytes(p, stage_tasks_);
      ++last;
    }
    CopyFault fault;
    size_t task = 0;
    if (!CopyPieces(stage_tasks_, stage_pieces_.data() + first, last - first,
                    options.check_finite, true, &fault, &task, threads_)) {
      const Write& w = writes_[stage_write_[task]];
      problems->push_back("'" + std::string(src_names_[w.first_src + fault.src]) +
                          "' holds a non-finite value at flat index " + std::to_string(fault.index));
      return false;
    }
    // Pieces follow each other in staging: chunks are consecutive ranges
    // (the range is taken whole in any case: what it holds is written now).
    stream.CopyInPinned(dev + lo, host + lo, hi - lo);
    first = last;
  }

  // One device pass from staging into the version's buffers.
  for (size_t k = 0; k < stage_tasks_.size(); ++k) {
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
