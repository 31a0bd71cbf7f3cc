// Self-play inference server: dynamic batching of many actors' requests into
// one Session::Run, recurrent state kept per actor (per row), and a pool of
// weight versions that share one compiled graph.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/thread_pool.h"
#include "kaiwu/session.h"
#include "runtime/server_request.h"

namespace kaiwu {

class InferenceServer {
 public:
  InferenceServer(std::shared_ptr<Session> session, ServerOptions options);
  ~InferenceServer();

  const Session& session() const { return *session_; }
  /// Non-state inputs (what an actor feeds), in the order requests carry them.
  const std::vector<IOInfo>& feed_inputs() const { return feed_inputs_; }
  /// Returned outputs (all model outputs, state outputs included).
  const std::vector<IOInfo>& outputs() const { return session_->outputs(); }
  const ServerOptions& options() const { return opt_; }
  int state_batch_axis(size_t k) const { return state_[k].in_axis; }

  /// Batch axis of each output (-1: none) and its shape at one row, for
  /// models whose observation inputs have fixed non-batch dims.
  std::vector<int> OutputLayout(std::vector<TensorView>* at_one_row);

  /// Runs every padded batch size up to max_batch once on zeros (the latest
  /// version's weights), `workers` runs at a time, so that plans, run contexts
  /// and CUDA graphs exist before the first request. Returns the batch sizes
  /// run: 0 without pad_batches (sizes are unbounded) or when a feed input's
  /// per-row shape is not fixed. Actors and stats are untouched.
  int Warmup();

  /// Queues a request (validating its feeds; throws kInput, kClosed, kQueueFull).
  void Submit(const std::shared_ptr<ServerRequest>& req);
  /// Zeroes an actor's state (dropped; the next request starts from zeros).
  void Reset(int64_t actor);
  /// Forgets an actor: state dropped, no longer counted as connected.
  void Release(int64_t actor);

  // ---- weight versions
  void AddVersion(const std::string& tag, const std::map<std::string, TensorView>& weights,
                  bool strict, bool check_finite, const std::string& base);
  void RemoveVersion(const std::string& tag);
  Session::RefitReport Refit(const std::map<std::string, TensorView>& weights,
                             const std::string& tag, bool strict, bool check_finite);
  std::vector<std::string> Versions() const;
  std::string Latest() const;

  ServerStats Stats() const;
  void ResetStats();
  /// Finishes batches in flight, fails queued requests with kClosed.
  void Close();
  bool closed() const { return closed_.load(); }

 private:
  struct StateSpec {
    std::string in_name, out_name;
    int in_index = -1, out_index = -1;
    int in_axis = 0, out_axis = 0;
    DType dtype = DType::kUndefined;
    Shape per_row;          ///< shape with the batch dim removed
    int64_t outer = 1, inner = 1;  ///< elements before / after the batch axis
  };
  struct Actor {
    int64_t rows = 0;
    uint64_t serial = 0;
    /// per state spec, [outer, rows, inner]; null = zeros on the next step
    std::shared_ptr<std::vector<Tensor>> state;
    int queued = 0;              ///< queued requests
    int running = 0;             ///< requests in a running batch
  };
  struct Queue {
    std::deque<std::shared_ptr<ServerRequest>> reqs;
    int64_t rows = 0;
  };
  struct Version {
    std::shared_ptr<const WeightSet> weights;
    uint64_t requests = 0, rows = 0;
  };
  using Clock = std::chrono::steady_clock;

  void WorkerLoop();
  using States = std::vector<std::shared_ptr<std::vector<Tensor>>>;
  void RunBatch(std::vector<std::shared_ptr<ServerRequest>>& batch, States& states);
  /// Runs requests [begin, end) as one batch: k slices side by side, one
  /// thread each, or one Run on all threads. Returns true when sliced.
  bool RunGroup(std::vector<std::shared_ptr<ServerRequest>>& batch, States& states, size_t begin,
                size_t end);
  /// Slices for a batch of `rows` rows (1: run it whole).
  int64_t Slices(int64_t rows) const;
  void Validate(const ServerRequest& r);
  std::vector<int> OutputAxes(const std::vector<TensorView>& feeds);
  int64_t Bucket(int64_t rows) const;

  std::shared_ptr<Session> session_;
  ServerOptions opt_;
  std::vector<IOInfo> feed_inputs_;
  std::vector<int> feed_index_;       ///< model input index of each feed input
  std::vector<StateSpec> state_;
  std::vector<int> out_state_;        ///< per output: state spec index or -1

  mutable std::mutex mu_;
  std::condition_variable work_cv_, space_cv_;
  std::map<std::pair<const WeightSet*, std::vector<int64_t>>, Queue> queues_;
  std::unordered_map<int64_t, Actor> actors_;
  int queued_actors_ = 0, running_actors_ = 0;
  int64_t queued_rows_ = 0;
  int running_requests_ = 0;
  std::map<std::string, Version> versions_;
  std::vector<std::string> version_order_;   ///< latest last
  std::atomic<bool> closed_{false};
  uint64_t actor_serial_ = 0;
  std::mutex refit_mu_;
  std::vector<std::thread> workers_;
  std::unique_ptr<ThreadPool> slice_pool_;   ///< runs batch slices (split_batches)
  std::atomic<double> row_us_{0};            ///< one row's single-thread run time (EMA)

  std::mutex validated_mu_;
  std::set<std::vector<int64_t>> validated_;
  std::mutex axes_mu_;
  std::map<std::vector<int64_t>, std::vector<int>> out_axes_;

  // stats (under mu_)
  Clock::time_point stats_start_;
  uint64_t st_requests_ = 0, st_rows_ = 0, st_batches_ = 0, st_failed_ = 0, st_sliced_ = 0;
  double st_run_us_ = 0;
  std::vector<uint64_t> st_hist_;
  std::vector<float> st_wait_;   ///< ring of recent queue waits (us)
  size_t st_wait_pos_ = 0;
};

}  // namespace kaiwu
