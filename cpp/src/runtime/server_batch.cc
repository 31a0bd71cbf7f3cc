#include "runtime/server_batch.h"

#include <algorithm>
#include <cstring>

#include "core/thread_pool.h"

namespace kaiwu {

BatchScratch::Buf& BatchScratch::Reserve(size_t i, size_t bytes) {
  if (bufs_.size() <= i) bufs_.resize(i + 1);
  Buf& b = bufs_[i];
  if (b.cap < bytes) {
    const size_t cap = bytes * 5 / 4 + 64;
    b.mem.reset();  // the old buffer goes before the new one comes
    if (alloc_) {
      b.mem = alloc_(cap);
    } else {
      auto t = std::make_shared<Tensor>(DType::kUInt8, Shape{static_cast<int64_t>(cap)});
      b.mem = std::shared_ptr<void>(t, t->data());
    }
    b.cap = cap;
    std::memset(b.mem.get(), 0, cap);
    b.dirty = 0;
  }
  return b;
}

void* BatchScratch::Get(size_t i, size_t bytes) {
  Buf& b = Reserve(i, bytes);
  b.dirty = std::max(b.dirty, bytes);
  return b.mem.get();
}

void* BatchScratch::GetPadded(size_t i, size_t used, size_t bytes) {
  Buf& b = Reserve(i, bytes);
  char* p = static_cast<char*>(b.mem.get());
  const size_t zero_end = std::min(b.dirty, bytes);
  if (zero_end > used) {
    std::memset(p + used, 0, zero_end - used);
    zeroed_ += zero_end - used;
  }
  b.dirty = b.dirty > bytes ? b.dirty : used;
  return p;
}

namespace {

// Runs `copies` on `pool` cut into about two pieces per thread (at least 256 KB
// each), in `pieces` (cleared first).
template <typename RowCopy>
void ParallelCopy(const std::vector<RowCopy>& copies, size_t total, ThreadPool* pool,
                  std::vector<RowCopy>& pieces) {
  const size_t piece = std::max<size_t>(size_t{1} << 18, total / (2 * pool->num_threads()) + 1);
  pieces.clear();
  for (const RowCopy& c : copies)
    for (size_t off = 0; off < c.bytes; off += piece)
      pieces.push_back(RowCopy{c.dst + off, c.src + off, std::min(piece, c.bytes - off)});
  pool->ParallelFor(static_cast<int64_t>(pieces.size()), 1e9, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) std::memcpy(pieces[k].dst, pieces[k].src, pieces[k].bytes);
  });
}

}  // namespace

size_t BatchAssembly::Gather(const Requests& batch, const RequestStates& states, size_t begin,
                             size_t end, BatchScratch* scratch, ThreadPool* pool) {
  const int64_t rows = slices_.rows, S = slices_.size, B = slices_.total();
  const ServerRequest& first = *batch[begin];
  const size_t num_feeds = layout_.feed_index.size();
  // Feeds: rows on axis 0, slice after slice; padding rows zero.
  feed_base_.resize(num_feeds);
  feed_row_bytes_.resize(num_feeds);
  std::vector<RowCopy>& copies = copies_;
  copies.clear();
  size_t total = 0;
  for (size_t i = 0; i < num_feeds; ++i) {
    const size_t row_bytes = first.feeds[i].bytes() / first.rows;
    char* dst = static_cast<char*>(scratch->GetPadded(i, row_bytes * rows, row_bytes * B));
    feed_base_[i] = dst;
    feed_row_bytes_[i] = row_bytes;
    for (size_t j = begin; j < end; ++j) {
      const size_t n = row_bytes * batch[j]->rows;
      copies.push_back(RowCopy{dst, static_cast<const char*>(batch[j]->feeds[i].data), n});
      dst += n;
      total += n;
    }
  }
  parallel_ = pool && pool->num_threads() > 1 && total >= kParallelBytes;
  if (parallel_)
    ParallelCopy(copies, total, pool, pieces_);
  else
    for (const RowCopy& c : copies) std::memcpy(c.dst, c.src, c.bytes);
  // Recurrent state: per-actor [outer, n, inner] into one [outer, n_s, inner]
  // block per slice (slice s starts at s * outer * S rows).
  state_base_.resize(layout_.state.size());
  for (size_t k = 0; k < layout_.state.size(); ++k) {
    const StateSpec& s = layout_.state[k];
    const size_t inner_bytes = s.inner_bytes();
    char* base = static_cast<char*>(scratch->Get(num_feeds + k, s.outer * B * inner_bytes));
    state_base_[k] = base;
    auto row_ptr = [&](int64_t r, int64_t o) {
      const int64_t sl = r / S, n_s = slices_.Rows(sl);
      return base + ((sl * s.outer * S) + o * n_s + (r - sl * S)) * inner_bytes;
    };
    int64_t r0 = 0;
    for (size_t j = begin; j < end; ++j) {
      const ServerRequest& r = *batch[j];
      const int64_t n = r.rows;
      char* st = static_cast<char*>((*states[j])[k].data());
      if (!r.done.empty()) {  // episode ends: zero those rows first
        for (int64_t row = 0; row < n; ++row)
          if (r.done[r.done.size() == 1 ? 0 : row])
            for (int64_t o = 0; o < s.outer; ++o)
              std::memset(st + (o * n + row) * inner_bytes, 0, inner_bytes);
      }
      for (int64_t o = 0; o < s.outer; ++o)
        for (int64_t row = 0; row < n; ++row)
          std::memcpy(row_ptr(r0 + row, o), st + (o * n + row) * inner_bytes, inner_bytes);
      r0 += n;
    }
    if (slices_.pad)  // pad rows are fed too: zero state
      for (int64_t r = rows; r < B; ++r)
        for (int64_t o = 0; o < s.outer; ++o) std::memset(row_ptr(r, o), 0, inner_bytes);
  }
  return total;
}

std::vector<TensorView> BatchAssembly::SliceInputs(const std::vector<TensorView>& feeds,
                                                   int64_t sl) const {
  const int64_t S = slices_.size, n_s = slices_.Rows(sl);
  std::vector<TensorView> in(layout_.num_inputs);
  for (size_t i = 0; i < layout_.feed_index.size(); ++i) {
    TensorView v{feeds[i].dtype, feeds[i].shape, feed_base_[i] + sl * S * feed_row_bytes_[i]};
    v.shape[0] = n_s;
    in[layout_.feed_index[i]] = std::move(v);
  }
  for (size_t k = 0; k < layout_.state.size(); ++k) {
    const StateSpec& s = layout_.state[k];
    in[s.in_index] =
        TensorView{s.dtype, s.AtRows(n_s), state_base_[k] + sl * s.outer * S * s.inner_bytes()};
  }
  return in;
}

void BatchAssembly::Scatter(const std::vector<int>& axes, const std::vector<RunResult>& res,
                            const Requests& batch, const RequestStates& states, size_t begin,
                            size_t end) const {
  const int64_t S = slices_.size;
  // Request rows [a, a + n) may span slices.
  int64_t a = 0;
  for (size_t j = begin; j < end; ++j) {
    ServerRequest& r = *batch[j];
    const int64_t n = r.rows;
    const int64_t s_first = a / S, s_last = (a + n - 1) / S;
    r.outputs.assign(axes.size(), TensorView{});
    r.owners.assign(axes.size(), nullptr);
    for (size_t k = 0; k < axes.size(); ++k) {
      const TensorView& o = res[s_first].outputs[k];
      const int ax = axes[k];
      if (ax < 0) {  // no batch axis: everyone gets the whole output
        r.outputs[k] = o;
        r.owners[k] = res[s_first].owner;
        continue;
      }
      const int64_t outer = ProdDims(o.shape, 0, ax);
      const size_t inner_bytes = ProdDims(o.shape, ax + 1, o.shape.size()) * DTypeSize(o.dtype);
      // Rows [a, a + n) of this output into dst laid out [outer, n, inner].
      auto copy_rows = [&](char* dst) {
        for (int64_t sl = s_first; sl <= s_last; ++sl) {
          const int64_t lo = std::max(a, sl * S), hi = std::min(a + n, (sl + 1) * S);
          const int64_t n_s = slices_.Rows(sl);
          const char* src = static_cast<const char*>(res[sl].outputs[k].data);
          for (int64_t q = 0; q < outer; ++q)
            std::memcpy(dst + (q * n + lo - a) * inner_bytes,
                        src + (q * n_s + lo - sl * S) * inner_bytes, (hi - lo) * inner_bytes);
        }
      };
      TensorView v{o.dtype, o.shape, nullptr};
      v.shape[ax] = n;
      if (outer == 1 && s_first == s_last) {
        v.data = static_cast<char*>(o.data) + (a - s_first * S) * inner_bytes;
        r.owners[k] = res[s_first].owner;
      } else {
        auto t = std::make_shared<Tensor>(o.dtype, v.shape);
        copy_rows(static_cast<char*>(t->data()));
        v.data = t->data();
        r.owners[k] = t;
      }
      r.outputs[k] = v;
      const int si = layout_.out_state[k];
      if (si >= 0) copy_rows(static_cast<char*>((*states[j])[si].data()));  // next state
    }
    a += n;
  }
}

}  // namespace kaiwu
