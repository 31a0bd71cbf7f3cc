#include "runtime/server_stats.h"

#include <algorithm>

namespace kaiwu {

StatsRecorder::StatsRecorder(int max_batch) : start_(Clock::now()) {
  hist_.assign(max_batch + 1, 0);
  wait_.reserve(kWaitRing);
}

void StatsRecorder::RecordBatch(int64_t rows, double run_us, bool sliced) {
  ++batches_;
  if (sliced) ++sliced_;
  run_us_ += run_us;
  ++hist_[std::min<int64_t>(rows, static_cast<int64_t>(hist_.size()) - 1)];
}

void StatsRecorder::RecordStages(double gather_us, double session_us, double scatter_us,
                                 uint64_t gathered_bytes, bool parallel_gather) {
  gather_us_ += gather_us;
  session_us_ += session_us;
  scatter_us_ += scatter_us;
  gathered_bytes_ += gathered_bytes;
  if (parallel_gather) ++parallel_gathers_;
}

void StatsRecorder::RecordRequest(int64_t rows, bool failed, float wait_us) {
  ++requests_;
  rows_ += rows;
  if (failed) ++failed_;
  if (wait_.size() < kWaitRing)
    wait_.push_back(wait_us);
  else
    wait_[wait_pos_++ & (kWaitRing - 1)] = wait_us;
}

void StatsRecorder::Reset(Clock::time_point now) {
  start_ = now;
  requests_ = rows_ = batches_ = failed_ = sliced_ = 0;
  run_us_ = 0;
  gather_us_ = session_us_ = scatter_us_ = finish_us_ = 0;
  gathered_bytes_ = parallel_gathers_ = 0;
  std::fill(hist_.begin(), hist_.end(), 0);
  wait_.clear();
  wait_pos_ = 0;
}

void StatsRecorder::Fill(Clock::time_point now, ServerStats* s) const {
  s->elapsed_s = std::chrono::duration<double>(now - start_).count();
  s->requests = requests_;
  s->rows = rows_;
  s->batches = batches_;
  s->sliced_batches = sliced_;
  s->failed = failed_;
  s->batch_hist = hist_;
  s->run_mean_us = batches_ ? run_us_ / batches_ : 0;
  const double per = batches_ ? 1.0 / batches_ : 0;
  s->gather_mean_us = gather_us_ * per;
  s->session_mean_us = session_us_ * per;
  s->scatter_mean_us = scatter_us_ * per;
  s->finish_mean_us = finish_us_ * per;
  s->gathered_bytes = gathered_bytes_;
  s->parallel_gathers = parallel_gathers_;
  if (!wait_.empty()) {
    std::vector<float> w = wait_;
    auto pct = [&](double p) {
      size_t i = std::min(w.size() - 1, static_cast<size_t>(p * (w.size() - 1) + 0.5));
      std::nth_element(w.begin(), w.begin() + i, w.end());
      return static_cast<double>(w[i]);
    };
    s->wait_p50_us = pct(0.5);
    s->wait_p99_us = pct(0.99);
  }
}

}  // namespace kaiwu
