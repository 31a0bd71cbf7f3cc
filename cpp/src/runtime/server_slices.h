// How big the runs of one batch are: padded batch sizes (a few buckets, so a
// server builds a bounded number of plans) and the cut of a batch into slices
// run side by side, one thread each, sized from the measured cost of a row.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace kaiwu {

/// How batch sizes round up (each size run is a plan, and on a device a CUDA
/// graph): not at all; to coarse buckets 1, 2, 4, 8, 12, 16, 24, 32, 48, ...
/// (powers of two, and 1.5x between them from 8 on: up to 50% padding, few
/// sizes for a device, where each new size costs graph captures and cuDNN
/// plans); or to fine buckets, every size to 16, then eight an octave (18, 20,
/// ..., 32, 36, 40, ...: under 12.5% padding, 64 sizes to 1024, for the CPU,
/// where a plan takes 0.2-0.4 ms to build and padding costs every run).
enum class Padding { kNone, kCoarse, kFine };

/// Rows a batch of `rows` rows runs as: the next bucket of `padding`, capped
/// at max_batch (kNone: `rows`).
int64_t PaddedRows(int64_t rows, int max_batch, Padding padding);

/// A batch of `rows` real rows cut into `count` slices of `size` rows each;
/// with `pad` every slice has `size` rows (the tail is padding), without it
/// the last slice is shorter.
struct SliceLayout {
  int64_t rows = 0;
  int64_t count = 1;
  int64_t size = 0;
  bool pad = false;

  /// Cuts `rows` rows into about `slices` slices (1: one run of
  /// PaddedRows(rows) rows); slices are padded like whole batches.
  static SliceLayout Plan(int64_t rows, int64_t slices, int max_batch, Padding padding);
  /// Rows gathered, padding included.
  int64_t total() const { return count * size; }
  /// Rows slice `s` runs with.
  int64_t Rows(int64_t s) const { return pad ? size : std::min(size, rows - s * size); }
};

/// Picks how many slices a batch runs as. Each slice should carry at least
/// min_slice_us of work, so that handing it to a thread is cheap next to
/// running it; until a row's cost is measured, one slice per thread.
/// Thread-safe (the cost is a relaxed atomic: a lost update only delays it).
class SliceTuner {
 public:
  /// `threads` <= 1: batches always run whole.
  SliceTuner(int threads, double min_slice_us) : threads_(threads), min_slice_us_(min_slice_us) {}

  int64_t Slices(int64_t rows) const;
  /// Slices of `rows` rows in all (padding included) took `thread_us`
  /// microseconds summed over their threads. Updates the cost per row (EMA).
  void Record(double thread_us, int64_t rows);
  /// One row's single-thread run time (us); 0 until measured.
  double row_us() const { return row_us_.load(std::memory_order_relaxed); }

 private:
  int threads_;
  double min_slice_us_;
  std::atomic<double> row_us_{0};
};

}  // namespace kaiwu
