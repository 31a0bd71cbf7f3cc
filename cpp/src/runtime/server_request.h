// What the inference server and its callers exchange: options, one actor's
// request (feeds in, outputs out), the stats snapshot and the server's errors.
// Kept apart from InferenceServer so that the server's parts (queue, actor
// store, batch assembly) can use these types without the whole server.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kaiwu/session.h"

namespace kaiwu {

/// Server-specific failures (Python: ServerClosedError / QueueFullError,
/// both KaiwuError subclasses).
class ServerError : public Error {
 public:
  enum Kind { kClosed = 100, kQueueFull = 101 };
  ServerError(Kind kind, std::string message)
      : Error(StatusCode::kRuntime, std::move(message)), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

struct ServerOptions {
  int max_batch = 256;        ///< rows per Session::Run
  int64_t max_wait_us = 500;  ///< flush a batch this long after its first request (or after a
                              ///< worker came free, if later)
  /// state input name -> output name carrying its next value.
  std::vector<std::pair<std::string, std::string>> state;
  /// Optional explicit batch axis per state input (else from symbolic dims, else 0).
  std::map<std::string, int> state_batch_axis;
  int64_t max_queue_rows = 0;  ///< 0: 4 * max_batch (at least 1024)
  bool queue_block = true;     ///< full queue: block (true) or throw kQueueFull
  /// Pad batch sizes to buckets (bounds the plan count): coarse ones on a
  /// device session, fine ones on the CPU (server_slices.h: Padding).
  bool pad_batches = true;
  int workers = 1;             ///< threads running batches
  /// Run a batch as several slices of rows side by side, each on one thread
  /// (data parallel), instead of one Run with intra-op threads. Slices are
  /// kept at >= ~30 us of work each (from measured run times). Like
  /// pad_batches, this assumes the model never mixes rows.
  bool split_batches = true;
  double min_slice_us = 30;  ///< least work per slice (0: one slice per thread)
  /// Threads that copy a batch's feed rows into its inputs when they are large
  /// (BatchAssembly::kParallelBytes and more): 0 picks (a device session: up
  /// to 4, half the physical cores; a CPU session: the slice threads, which
  /// wait for the copy anyway); 1: the worker alone.
  int copy_threads = 0;
  std::string base_version = "base";
};

/// One step's request. Feeds are views the caller keeps alive until done.
struct ServerRequest {
  int64_t actor = 0;
  int64_t rows = 0;
  std::vector<TensorView> feeds;  ///< one per non-state input (server order)
  std::vector<uint8_t> done;      ///< empty, 1 entry (all rows) or `rows` entries
  std::string version;            ///< "" = latest

  // ---- filled by the server
  std::shared_ptr<const WeightSet> weights;
  std::string version_tag;
  uint64_t actor_serial = 0;
  std::chrono::steady_clock::time_point enqueued;
  std::vector<TensorView> outputs;            ///< per returned output, this request's rows
  std::vector<std::shared_ptr<void>> owners;  ///< keep `outputs` alive
  std::exception_ptr error;
  /// Called on completion (success or failure) from a server thread.
  std::function<void(ServerRequest&)> on_done;

  bool Wait(double timeout_s);  ///< true when done
  bool IsDone();

  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
};

/// Requests that run (or ran) together, in queue order.
using Requests = std::vector<std::shared_ptr<ServerRequest>>;

/// Marks `r` finished, wakes its waiters, then calls (and drops) its on_done.
/// Call without the server lock: on_done may do anything.
void FinishRequest(ServerRequest& r);

struct ServerStats {
  double elapsed_s = 0;
  uint64_t requests = 0, rows = 0, batches = 0, failed = 0;
  uint64_t sliced_batches = 0;       ///< batches run as slices side by side
  std::vector<uint64_t> batch_hist;  ///< index: rows in the batch (before padding)
  double wait_p50_us = 0, wait_p99_us = 0, run_mean_us = 0;
  /// Where a batch's time goes, mean per batch (us): copying its rows into
  /// the inputs, the session's runs (device copies included), handing each
  /// request its rows, and finishing the requests (waking their callers;
  /// a shared-memory client's results are copied into its slot here).
  double gather_mean_us = 0, session_mean_us = 0, scatter_mean_us = 0, finish_mean_us = 0;
  uint64_t gathered_bytes = 0;  ///< feed bytes copied into batch inputs (padding excluded)
  uint64_t parallel_gathers = 0;  ///< batches whose rows were copied on several threads
  bool pinned_inputs = false;   ///< batches gather into page-locked memory (device sessions)
  std::map<std::string, std::pair<uint64_t, uint64_t>> per_version;  ///< requests, rows
  int connected = 0, queued = 0, running = 0;  ///< actors, queued / running requests
};

}  // namespace kaiwu
