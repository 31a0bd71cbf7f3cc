// Self-play inference server: dynamic batching of many actors' requests into
// one Session::Run, recurrent state kept per actor (per row), and a pool of
// weight versions that share one compiled graph.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/thread_pool.h"
#include "kaiwu/session.h"
#include "runtime/server_batch.h"
#include "runtime/server_layout.h"
#include "runtime/server_queue.h"
#include "runtime/server_request.h"
#include "runtime/server_shapes.h"
#include "runtime/server_slices.h"
#include "runtime/server_state.h"
#include "runtime/server_stats.h"
#include "runtime/server_versions.h"

namespace kaiwu {

/// Serves many actors' steps through one Session: queues their requests,
/// runs them in batches (padded and sliced) on worker threads, keeps each
/// recurrent actor's state and the weight versions. One mutex guards the
/// queue, the actor store, the version pool and the stats.
class InferenceServer {
 public:
  InferenceServer(std::shared_ptr<Session> session, ServerOptions options);
  ~InferenceServer();

  const Session& session() const { return *session_; }
  /// Non-state inputs (what an actor feeds), in the order requests carry them.
  const std::vector<IOInfo>& feed_inputs() const { return layout_.feed_inputs; }
  /// Returned outputs (all model outputs, state outputs included).
  const std::vector<IOInfo>& outputs() const { return session_->outputs(); }
  const ServerOptions& options() const { return opt_; }
  int state_batch_axis(size_t k) const { return layout_.state[k].in_axis; }

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
  using Clock = std::chrono::steady_clock;

  /// Where one batch's time went (us) and the feed bytes it gathered.
  struct BatchTimes {
    double gather_us = 0, session_us = 0, scatter_us = 0;
    uint64_t gathered_bytes = 0;
    bool parallel_gather = false;
  };

  void WorkerLoop();
  void RunBatch(Requests& batch, RequestStates& states, BatchScratch* scratch, BatchTimes* times);
  /// Runs requests [begin, end) as one batch: k slices side by side, one
  /// thread each, or one Run on all threads. Returns true when sliced.
  bool RunGroup(Requests& batch, RequestStates& states, size_t begin, size_t end,
                BatchScratch* scratch, BatchTimes* times);
  /// The threads that copy large batches' rows (null: the worker alone).
  ThreadPool* copy_pool() const;

  std::shared_ptr<Session> session_;
  ServerOptions opt_;
  Padding padding_;  ///< how batch sizes round up (from pad_batches and the device)
  ServerLayout layout_;
  ServerShapes shapes_;                     ///< own locks
  std::unique_ptr<ThreadPool> slice_pool_;  ///< runs batch slices (split_batches)
  std::unique_ptr<ThreadPool> copy_pool_;   ///< copies large batches' rows (copy_threads)
  SliceTuner slice_tuner_;                  ///< thread-safe
  bool pinned_inputs_;                      ///< workers gather into page-locked memory

  mutable std::mutex mu_;
  std::condition_variable work_cv_, space_cv_;
  BatchQueue queue_;          // under mu_
  ActorStore actors_;         // under mu_
  VersionPool versions_;      // under mu_
  StatsRecorder stats_;       // under mu_
  int running_requests_ = 0;  // under mu_
  std::atomic<bool> closed_{false};
  std::mutex refit_mu_;
  std::vector<std::thread> workers_;
};

}  // namespace kaiwu
