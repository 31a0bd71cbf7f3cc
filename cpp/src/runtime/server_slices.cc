#include "runtime/server_slices.h"

namespace kaiwu {

int64_t PaddedRows(int64_t rows, int max_batch, Padding padding) {
  if (padding == Padding::kNone) return rows;
  int64_t b = rows;
  if (padding == Padding::kCoarse) {
    b = 1;
    while (b < rows) {
      if (b >= 8 && b + b / 2 >= rows) {
        b = b + b / 2;
        break;
      }
      b *= 2;
    }
  } else if (padding == Padding::kFine && rows > 16) {
    int64_t octave = 16;  // the largest power of two below rows
    while (octave * 2 < rows) octave *= 2;
    const int64_t step = octave / 8;
    b = (rows + step - 1) / step * step;
  }
  return std::min<int64_t>(b, max_batch);
}

SliceLayout SliceLayout::Plan(int64_t rows, int64_t slices, int max_batch, Padding padding) {
  SliceLayout l;
  l.rows = rows;
  l.pad = padding != Padding::kNone;
  l.count = slices;
  l.size = PaddedRows(rows, max_batch, padding);
  if (slices > 1) {
    l.size = PaddedRows((rows + slices - 1) / slices, max_batch, padding);
    l.count = (rows + l.size - 1) / l.size;
  }
  return l;
}

int64_t SliceTuner::Slices(int64_t rows) const {
  if (threads_ <= 1 || rows <= 1) return 1;
  int64_t k = std::min<int64_t>(threads_, rows);
  const double t = row_us();
  if (t > 0 && min_slice_us_ > 0)
    k = std::min<int64_t>(k, std::max<int64_t>(1, static_cast<int64_t>(rows * t / min_slice_us_)));
  return k;
}

void SliceTuner::Record(double thread_us, int64_t rows) {
  const double per_row = thread_us / static_cast<double>(rows);
  const double old = row_us_.load(std::memory_order_relaxed);
  row_us_.store(old > 0 ? 0.9 * old + 0.1 * per_row : per_row, std::memory_order_relaxed);
}

}  // namespace kaiwu
