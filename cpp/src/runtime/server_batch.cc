#include "runtime/server_batch.h"

#include <algorithm>
#include <cstring>

namespace kaiwu {

void* BatchScratch::Get(size_t i, size_t bytes) {
  if (bufs_.size() <= i) bufs_.resize(i + 1);
  if (bufs_[i].bytes() < bytes)
    bufs_[i] = Tensor(DType::kUInt8, Shape{static_cast<int64_t>(bytes * 5 / 4 + 64)});
  return bufs_[i].data();
}

void BatchAssembly::Gather(const Requests& batch, const RequestStates& states, size_t begin,
                           size_t end, BatchScratch* scratch) {
  const int64_t rows = slices_.rows, S = slices_.size, B = slices_.total();
  const ServerRequest& first = *batch[begin];
  const size_t num_feeds = layout_.feed_index.size();
  // Feeds: rows on axis 0, slice after slice.
  feed_base_.resize(num_feeds);
  feed_row_bytes_.resize(num_feeds);
  for (size_t i = 0; i < num_feeds; ++i) {
    const size_t row_bytes = first.feeds[i].bytes() / first.rows;
    char* dst = static_cast<char*>(scratch->Get(i, row_bytes * B));
    feed_base_[i] = dst;
    feed_row_bytes_[i] = row_bytes;
    for (size_t j = begin; j < end; ++j) {
      std::memcpy(dst, batch[j]->feeds[i].data, row_bytes * batch[j]->rows);
      dst += row_bytes * batch[j]->rows;
    }
    std::memset(dst, 0, row_bytes * (B - rows));
  }
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
