#include "runtime/server.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace kaiwu {

namespace {

ServerOptions CheckedOptions(ServerOptions opt) {
  KAIWU_CHECK(opt.max_batch >= 1, StatusCode::kInput, "max_batch must be >= 1");
  KAIWU_CHECK(opt.max_wait_us >= 0, StatusCode::kInput, "max_wait_us must be >= 0");
  KAIWU_CHECK(opt.workers >= 1, StatusCode::kInput, "workers must be >= 1");
  KAIWU_CHECK(opt.min_slice_us >= 0, StatusCode::kInput, "min_slice_us must be >= 0");
  KAIWU_CHECK(opt.copy_threads >= 0, StatusCode::kInput, "copy_threads must be >= 0");
  if (opt.max_queue_rows <= 0) opt.max_queue_rows = std::max<int64_t>(1024, 4 * opt.max_batch);
  KAIWU_CHECK(opt.max_queue_rows >= opt.max_batch, StatusCode::kInput,
              "max_queue_rows must be >= max_batch");
  return opt;
}

std::unique_ptr<ThreadPool> SlicePool(const Session& session, const ServerOptions& opt) {
  // Slices side by side pay off on CPU cores; a device runs each batch whole.
  if (opt.split_batches && session.num_threads() > 1 && !session.on_device())
    return std::make_unique<ThreadPool>(session.num_threads());
  return nullptr;
}

// A pool of its own for copy_threads > 1, or by default on a device session
// (whose one run leaves the host cores free); a CPU session's default is the slice pool.
std::unique_ptr<ThreadPool> CopyPool(const Session& session, const ServerOptions& opt) {
  int n = opt.copy_threads;
  if (n == 0 && session.on_device()) n = std::min(4, std::max(1, ThreadPool::PhysicalCores() / 2));
  if (n <= 1) return nullptr;
  return std::make_unique<ThreadPool>(n);
}

// Gathered inputs page-locked on a device session; KAIWU_SERVER_PINNED=0
// gathers into pageable memory instead (the run then stages each input
// through its own page-locked buffer: one more copy; for A/B measurements).
bool PinnedInputs(const Session& session) {
  const char* env = std::getenv("KAIWU_SERVER_PINNED");
  return session.on_device() && !(env && std::strcmp(env, "0") == 0);
}

ServerError Closed() { return ServerError(ServerError::kClosed, "the inference server is closed"); }

}  // namespace

InferenceServer::InferenceServer(std::shared_ptr<Session> session, ServerOptions options)
    : session_(std::move(session)),
      opt_(CheckedOptions(std::move(options))),
      padding_(!opt_.pad_batches          ? Padding::kNone
               : session_->on_device() ? Padding::kCoarse
                                       : Padding::kFine),
      layout_(ServerLayout::Build(session_->inputs(), session_->outputs(), opt_)),
      shapes_(*session_, layout_),
      slice_pool_(SlicePool(*session_, opt_)),
      copy_pool_(CopyPool(*session_, opt_)),
      pinned_inputs_(PinnedInputs(*session_)),
      slice_tuner_(slice_pool_ ? slice_pool_->num_threads() : 1, opt_.min_slice_us),
      queue_(opt_.max_batch, opt_.max_wait_us, opt_.max_queue_rows),
      actors_(layout_.state),
      versions_(opt_.base_version, session_->CurrentWeights()),
      stats_(opt_.max_batch) {
  for (int w = 0; w < opt_.workers; ++w) workers_.emplace_back([this] { WorkerLoop(); });
}

InferenceServer::~InferenceServer() { Close(); }

std::vector<int> InferenceServer::OutputLayout(std::vector<TensorView>* at_one_row) {
  return shapes_.OutputLayout(at_one_row);
}

void InferenceServer::Submit(const std::shared_ptr<ServerRequest>& req) {
  if (closed_) throw Closed();
  const int64_t rows = layout_.CheckFeeds(*req, opt_.max_batch);
  shapes_.Check(*req, rows, PaddedRows(rows, opt_.max_batch, padding_));
  req->rows = rows;
  std::vector<int64_t> row_key = RowShapeKey(req->feeds);

  std::unique_lock<std::mutex> lock(mu_);
  if (closed_) throw Closed();
  std::string tag;
  const std::shared_ptr<const WeightSet>* weights = &versions_.ForRequest(req->version, &tag);
  actors_.CheckSubmit(req->actor, rows);
  while (!queue_.HasSpace(rows)) {
    if (!opt_.queue_block)
      throw ServerError(ServerError::kQueueFull,
                        "the server queue is full (" + std::to_string(queue_.queued_rows()) +
                            " rows queued, max_queue_rows=" + std::to_string(opt_.max_queue_rows) +
                            ")");
    space_cv_.wait(lock);
    if (closed_) throw Closed();
    weights = versions_.Find(tag);
    KAIWU_CHECK(weights, StatusCode::kInput, "weight version '", tag,
                "' was removed while the request waited for queue space");
  }
  req->actor_serial = actors_.Enqueue(req->actor, rows);
  req->weights = *weights;
  req->version_tag = std::move(tag);
  req->enqueued = Clock::now();
  // Wake a worker only when this request can change its decision: a new
  // deadline (first request of a queue), a full batch, or every actor waiting.
  // Otherwise the idle workers' deadline stands and a wake-up would be wasted.
  if (queue_.Push(req, std::move(row_key)) || actors_.AllWaiting()) work_cv_.notify_one();
}

int InferenceServer::Warmup() {
  if (closed_) throw Closed();
  if (!opt_.pad_batches || !layout_.FixedRowShapes()) return 0;
  std::shared_ptr<const WeightSet> weights;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::string latest;
    weights = versions_.ForRequest("", &latest);
  }
  int sizes = 0;
  for (int64_t rows = 1;;) {
    const int64_t S = PaddedRows(rows, opt_.max_batch, padding_);
    std::vector<Tensor> zeros;
    std::vector<TensorView> feeds(layout_.num_inputs);
    auto add = [&](int index, DType dtype, Shape shape) {
      zeros.emplace_back(dtype, std::move(shape));
      std::memset(zeros.back().data(), 0, zeros.back().bytes());
      feeds[index] = TensorView{dtype, zeros.back().shape(), zeros.back().data()};
    };
    zeros.reserve(layout_.feed_inputs.size() + layout_.state.size());
    for (size_t i = 0; i < layout_.feed_inputs.size(); ++i) {
      Shape s = layout_.feed_inputs[i].dims;
      s[0] = S;
      add(layout_.feed_index[i], layout_.feed_inputs[i].dtype, s);
    }
    for (const StateSpec& st : layout_.state) add(st.in_index, st.dtype, st.AtRows(S));
    // One run builds the plan; then as many runs at once as workers, so that
    // each concurrent run has its own context.
    session_->Run(feeds, nullptr, weights.get());
    std::vector<std::exception_ptr> errors(opt_.workers);
    std::vector<std::thread> threads;
    for (int w = 0; w < opt_.workers && opt_.workers > 1; ++w)
      threads.emplace_back([&, w] {
        try {
          session_->Run(feeds, nullptr, weights.get());
        } catch (...) {
          errors[w] = std::current_exception();
        }
      });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
    ++sizes;
    if (S >= opt_.max_batch) return sizes;
    rows = S + 1;
  }
}

void InferenceServer::Reset(int64_t actor) {
  std::lock_guard<std::mutex> lock(mu_);
  actors_.Reset(actor);
}

void InferenceServer::Release(int64_t actor) {
  std::lock_guard<std::mutex> lock(mu_);
  if (actors_.Release(actor)) work_cv_.notify_all();  // fewer actors may complete a batch
}

ThreadPool* InferenceServer::copy_pool() const {
  if (copy_pool_) return copy_pool_.get();
  return opt_.copy_threads == 0 ? slice_pool_.get() : nullptr;
}

void InferenceServer::WorkerLoop() {
  // This worker's gathered inputs: page-locked on a device session, so that
  // the run moves them with one DMA each (no copy into staging first).
  BatchScratch scratch(pinned_inputs_
                           ? BatchScratch::Alloc([this](size_t n) { return session_->AllocHostBuffer(n); })
                           : nullptr);
  std::unique_lock<std::mutex> lock(mu_);
  // A queue's wait counts from its first request, or from when this worker
  // came free if that is later (see BatchQueue::PopReady). Otherwise the
  // actors settle into groups that alternate in half-size batches (each group
  // queues while the other runs).
  Clock::time_point free_since = Clock::now();
  while (!closed_) {
    Requests batch;
    Clock::time_point deadline;
    if (!queue_.PopReady(Clock::now(), free_since, actors_.AllWaiting(), &batch, &deadline)) {
      if (deadline == Clock::time_point::max())
        work_cv_.wait(lock);
      else
        work_cv_.wait_until(lock, deadline);
      continue;
    }
    RequestStates states;
    states.reserve(batch.size());
    for (const auto& r : batch) states.push_back(actors_.Start(r->actor, r->actor_serial, r->rows));
    running_requests_ += static_cast<int>(batch.size());
    space_cv_.notify_all();
    lock.unlock();
    BatchTimes times;
    RunBatch(batch, states, &scratch, &times);
    lock.lock();
    running_requests_ -= static_cast<int>(batch.size());
    for (const auto& r : batch) actors_.Finish(r->actor, r->actor_serial);
    lock.unlock();
    const auto f0 = Clock::now();
    for (auto& r : batch) FinishRequest(*r);
    batch.clear();
    free_since = Clock::now();
    lock.lock();
    stats_.RecordFinish(std::chrono::duration<double, std::micro>(free_since - f0).count());
  }
}

void InferenceServer::RunBatch(Requests& batch, RequestStates& states, BatchScratch* scratch,
                               BatchTimes* times) {
  const auto t0 = Clock::now();
  bool sliced = false;
  try {
    sliced = RunGroup(batch, states, 0, batch.size(), scratch, times);
  } catch (...) {
    if (batch.size() == 1) {
      batch[0]->error = std::current_exception();
    } else {
      // Isolate the failure: each request alone, so only bad ones fail.
      for (size_t i = 0; i < batch.size(); ++i) {
        try {
          RunGroup(batch, states, i, i + 1, scratch, times);
        } catch (...) {
          batch[i]->error = std::current_exception();
        }
      }
    }
  }
  const auto t1 = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  int64_t rows = 0;
  for (const auto& r : batch) {
    rows += r->rows;
    stats_.RecordRequest(r->rows, r->error != nullptr,
                         std::chrono::duration<float, std::micro>(t0 - r->enqueued).count());
    versions_.Count(r->version_tag, r->rows);
  }
  stats_.RecordBatch(rows, std::chrono::duration<double, std::micro>(t1 - t0).count(), sliced);
  stats_.RecordStages(times->gather_us, times->session_us, times->scatter_us, times->gathered_bytes,
                      times->parallel_gather);
}

bool InferenceServer::RunGroup(Requests& batch, RequestStates& states, size_t begin, size_t end,
                               BatchScratch* scratch, BatchTimes* times) {
  auto us_since = [](Clock::time_point a) {
    return std::chrono::duration<double, std::micro>(Clock::now() - a).count();
  };
  int64_t rows = 0;
  for (size_t j = begin; j < end; ++j) rows += batch[j]->rows;
  // k slices of S rows (the last one shorter without padding) run side by
  // side, one thread each; or one run of PaddedRows(rows) rows on all threads.
  const SliceLayout slices =
      SliceLayout::Plan(rows, slice_tuner_.Slices(rows), opt_.max_batch, padding_);
  const int64_t k = slices.count;
  const ServerRequest& first = *batch[begin];
  BatchAssembly assembly(layout_, slices);
  auto t = Clock::now();
  times->gathered_bytes += assembly.Gather(batch, states, begin, end, scratch, copy_pool());
  times->gather_us += us_since(t);
  times->parallel_gather |= assembly.parallel();
  const std::vector<int> axes = shapes_.OutputAxes(first.feeds);
  std::vector<RunResult> res(k);
  t = Clock::now();
  if (k == 1) {
    res[0] = session_->Run(assembly.SliceInputs(first.feeds, 0), nullptr, first.weights.get());
  } else {
    std::vector<std::exception_ptr> errors(k);
    std::vector<double> us(k, 0.0);
    slice_pool_->ParallelFor(k, 1e12, [&](int64_t s0, int64_t s1) {
      for (int64_t sl = s0; sl < s1; ++sl) {
        const auto a = Clock::now();
        try {
          res[sl] = session_->Run(assembly.SliceInputs(first.feeds, sl), nullptr,
                                  first.weights.get(), /*single_thread=*/true);
        } catch (...) {
          errors[sl] = std::current_exception();
        }
        us[sl] = std::chrono::duration<double, std::micro>(Clock::now() - a).count();
      }
    });
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
    double sum = 0;
    for (double u : us) sum += u;
    slice_tuner_.Record(sum, slices.total());
  }
  times->session_us += us_since(t);
  t = Clock::now();
  assembly.Scatter(axes, res, batch, states, begin, end);
  times->scatter_us += us_since(t);
  return k > 1;
}

void InferenceServer::AddVersion(const std::string& tag,
                                 const std::map<std::string, TensorView>& weights, bool strict,
                                 bool check_finite, const std::string& base) {
  std::shared_ptr<const WeightSet> base_ws;
  {
    std::lock_guard<std::mutex> lock(mu_);
    base_ws = versions_.BaseFor(tag, base);
  }
  auto ws = session_->BuildWeights(weights, strict, check_finite, nullptr, base_ws.get());
  std::lock_guard<std::mutex> lock(mu_);
  versions_.Add(tag, std::move(ws));
}

void InferenceServer::RemoveVersion(const std::string& tag) {
  std::lock_guard<std::mutex> lock(mu_);
  versions_.Remove(tag);
}

Session::RefitReport InferenceServer::Refit(const std::map<std::string, TensorView>& weights,
                                            const std::string& tag, bool strict,
                                            bool check_finite) {
  std::lock_guard<std::mutex> refit_lock(refit_mu_);
  std::shared_ptr<const WeightSet> base_ws;
  std::string t;
  {
    std::lock_guard<std::mutex> lock(mu_);
    base_ws = versions_.RefitSource(tag, &t);
  }
  Session::RefitReport report;
  auto ws = session_->BuildWeights(weights, strict, check_finite, &report, base_ws.get());
  std::lock_guard<std::mutex> lock(mu_);
  versions_.Replace(t, std::move(ws));
  return report;
}

std::vector<std::string> InferenceServer::Versions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return versions_.order();
}

std::string InferenceServer::Latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return versions_.latest();
}

ServerStats InferenceServer::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  ServerStats s;
  stats_.Fill(Clock::now(), &s);
  s.per_version = versions_.Counts();
  s.connected = actors_.connected();
  s.queued = queue_.queued_requests();
  s.running = running_requests_;
  s.pinned_inputs = pinned_inputs_;
  return s;
}

void InferenceServer::ResetStats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.Reset(Clock::now());
  versions_.ResetCounts();
}

void InferenceServer::Close() {
  Requests failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closed_.exchange(true)) {
      failed = queue_.TakeAll();
      actors_.DropQueued();
    }
  }
  work_cv_.notify_all();
  space_cv_.notify_all();
  for (auto& r : failed) {
    r->error = std::make_exception_ptr(ServerError(
        ServerError::kClosed, "the inference server was closed before this request ran"));
    FinishRequest(*r);
  }
  for (auto& w : workers_)
    if (w.joinable() && w.get_id() != std::this_thread::get_id()) w.join();
}

}  // namespace kaiwu
