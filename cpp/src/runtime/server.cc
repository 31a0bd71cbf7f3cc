#include "runtime/server.h"

#include <algorithm>
#include <cstring>
#include <sstream>

namespace kaiwu {

namespace {

int64_t Prod(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

// Reusable per-thread scratch for batch inputs.
struct Scratch {
  std::vector<Tensor> bufs;
  void* Get(size_t i, size_t bytes) {
    if (bufs.size() <= i) bufs.resize(i + 1);
    if (bufs[i].bytes() < bytes) bufs[i] = Tensor(DType::kUInt8, Shape{static_cast<int64_t>(bytes * 5 / 4 + 64)});
    return bufs[i].data();
  }
};

}  // namespace

InferenceServer::InferenceServer(std::shared_ptr<Session> session, ServerOptions options)
    : session_(std::move(session)), opt_(std::move(options)) {
  KAIWU_CHECK(opt_.max_batch >= 1, StatusCode::kInput, "max_batch must be >= 1");
  KAIWU_CHECK(opt_.max_wait_us >= 0, StatusCode::kInput, "max_wait_us must be >= 0");
  KAIWU_CHECK(opt_.workers >= 1, StatusCode::kInput, "workers must be >= 1");
  KAIWU_CHECK(opt_.min_slice_us >= 0, StatusCode::kInput, "min_slice_us must be >= 0");
  if (opt_.max_queue_rows <= 0) opt_.max_queue_rows = std::max<int64_t>(1024, 4 * opt_.max_batch);
  KAIWU_CHECK(opt_.max_queue_rows >= opt_.max_batch, StatusCode::kInput,
              "max_queue_rows must be >= max_batch");
  const auto& ins = session_->inputs();
  const auto& outs = session_->outputs();
  std::map<std::string, int> in_idx, out_idx;
  for (size_t i = 0; i < ins.size(); ++i) in_idx[ins[i].name] = static_cast<int>(i);
  for (size_t i = 0; i < outs.size(); ++i) out_idx[outs[i].name] = static_cast<int>(i);
  std::set<std::string> state_inputs;
  for (const auto& [in, out] : opt_.state) {
    KAIWU_CHECK(in_idx.count(in), StatusCode::kInput, "state: '", in, "' is not a model input");
    KAIWU_CHECK(out_idx.count(out), StatusCode::kInput, "state: '", out, "' is not a model output");
    KAIWU_CHECK(!state_inputs.count(in), StatusCode::kInput, "state: '", in, "' given twice");
    state_inputs.insert(in);
  }
  for (const auto& [name, axis] : opt_.state_batch_axis)
    KAIWU_CHECK(state_inputs.count(name), StatusCode::kInput, "state_batch_axis: '", name,
                "' is not a state input");
  for (size_t i = 0; i < ins.size(); ++i) {
    if (state_inputs.count(ins[i].name)) continue;
    feed_inputs_.push_back(ins[i]);
    feed_index_.push_back(static_cast<int>(i));
  }
  KAIWU_CHECK(!feed_inputs_.empty(), StatusCode::kInput,
              "the model needs at least one input that is not recurrent state");
  std::string batch_symbol;
  const IOInfo& obs = feed_inputs_[0];
  if (obs.has_shape && !obs.dims.empty() && obs.dims[0] < 0) batch_symbol = obs.symbols[0];

  out_state_.assign(outs.size(), -1);
  for (const auto& [in, out] : opt_.state) {
    StateSpec s;
    s.in_name = in;
    s.out_name = out;
    s.in_index = in_idx[in];
    s.out_index = out_idx[out];
    const IOInfo& io = ins[s.in_index];
    s.dtype = io.dtype;
    KAIWU_CHECK(io.has_shape, StatusCode::kInput, "state input '", in,
                "' has no declared shape; the server needs its non-batch dims");
    KAIWU_CHECK(outs[s.out_index].dtype == io.dtype, StatusCode::kInput, "state '", in,
                "' and output '", out, "' have different dtypes");
    int axis = -1;
    auto ov = opt_.state_batch_axis.find(in);
    if (ov != opt_.state_batch_axis.end()) {
      axis = ov->second < 0 ? ov->second + static_cast<int>(io.dims.size()) : ov->second;
      KAIWU_CHECK(axis >= 0 && axis < static_cast<int>(io.dims.size()), StatusCode::kInput,
                  "state_batch_axis for '", in, "' is out of range for rank ", io.dims.size());
    } else {
      if (!batch_symbol.empty())
        for (size_t d = 0; d < io.dims.size(); ++d)
          if (io.symbols[d] == batch_symbol) axis = static_cast<int>(d);
      if (axis < 0) axis = 0;
    }
    KAIWU_CHECK(!io.dims.empty(), StatusCode::kInput, "state input '", in, "' is a scalar");
    s.in_axis = axis;
    s.out_axis = axis;
    for (size_t d = 0; d < io.dims.size(); ++d) {
      if (static_cast<int>(d) == axis) continue;
      KAIWU_CHECK(io.dims[d] >= 0, StatusCode::kInput, "state input '", in, "': dimension ", d,
                  " is not fixed; only the batch axis (", axis, ") may vary");
      s.per_row.push_back(io.dims[d]);
    }
    Shape full = io.dims;
    full[axis] = 1;
    s.outer = Prod(full, 0, axis);
    s.inner = Prod(full, axis + 1, full.size());
    out_state_[s.out_index] = static_cast<int>(state_.size());
    state_.push_back(s);
  }
  versions_[opt_.base_version].weights = session_->CurrentWeights();
  version_order_.push_back(opt_.base_version);
  st_hist_.assign(opt_.max_batch + 1, 0);
  st_wait_.reserve(1 << 16);
  stats_start_ = Clock::now();
  // Slices side by side pay off on CPU cores; a device runs each batch whole.
  if (opt_.split_batches && session_->num_threads() > 1 && !session_->on_device())
    slice_pool_ = std::make_unique<ThreadPool>(session_->num_threads());
  for (int w = 0; w < opt_.workers; ++w) workers_.emplace_back([this] { WorkerLoop(); });
}

InferenceServer::~InferenceServer() { Close(); }

int64_t InferenceServer::Bucket(int64_t rows) const {
  if (!opt_.pad_batches) return rows;
  int64_t b = 1;
  while (b < rows) {
    if (b >= 8 && b + b / 2 >= rows) {
      b = b + b / 2;
      break;
    }
    b *= 2;
  }
  return std::min<int64_t>(b, opt_.max_batch);
}

void InferenceServer::Validate(const ServerRequest& r) {
  KAIWU_CHECK(r.feeds.size() == feed_inputs_.size(), StatusCode::kInput, "expected ",
              feed_inputs_.size(), " feeds, got ", r.feeds.size());
  int64_t rows = -1;
  for (size_t i = 0; i < r.feeds.size(); ++i) {
    const TensorView& f = r.feeds[i];
    const IOInfo& io = feed_inputs_[i];
    KAIWU_CHECK(f.dtype == io.dtype, StatusCode::kInput, "input '", io.name, "': expected dtype ",
                DTypeName(io.dtype), ", got ", DTypeName(f.dtype));
    KAIWU_CHECK(!f.shape.empty(), StatusCode::kInput, "input '", io.name,
                "': expected rows on axis 0, got a scalar");
    if (io.has_shape)
      KAIWU_CHECK(f.shape.size() == io.dims.size(), StatusCode::kInput, "input '", io.name,
                  "': expected rank ", io.dims.size(), ", got shape ", ShapeToString(f.shape));
    if (rows < 0) rows = f.shape[0];
    KAIWU_CHECK(f.shape[0] == rows, StatusCode::kInput, "input '", io.name, "' has ", f.shape[0],
                " rows, but input '", feed_inputs_[0].name, "' has ", rows);
  }
  KAIWU_CHECK(rows >= 1, StatusCode::kInput, "a request needs at least one row");
  KAIWU_CHECK(rows <= opt_.max_batch, StatusCode::kInput, "a request has ", rows,
              " rows, more than max_batch (", opt_.max_batch, ")");
  KAIWU_CHECK(r.done.size() <= 1 || static_cast<int64_t>(r.done.size()) == rows,
              StatusCode::kInput, "done must be one flag or one per row (", rows, "), got ",
              r.done.size());
  // Shape check against the model, once per distinct signature.
  std::vector<int64_t> key;
  for (const auto& f : r.feeds) {
    key.push_back(static_cast<int64_t>(f.dtype));
    key.push_back(static_cast<int64_t>(f.shape.size()));
    key.insert(key.end(), f.shape.begin(), f.shape.end());
  }
  {
    std::lock_guard<std::mutex> lock(validated_mu_);
    if (validated_.count(key)) return;
  }
  std::vector<TensorView> probe(session_->inputs().size());
  for (size_t i = 0; i < feed_index_.size(); ++i) probe[feed_index_[i]] = TensorView{r.feeds[i].dtype, r.feeds[i].shape, nullptr};
  for (const auto& s : state_) {
    Shape sh = session_->inputs()[s.in_index].dims;
    sh[s.in_axis] = rows;
    probe[s.in_index] = TensorView{s.dtype, sh, nullptr};
  }
  session_->OutputShapes(probe);  // throws kInput naming the input
  std::lock_guard<std::mutex> lock(validated_mu_);
  if (validated_.size() > 4096) validated_.clear();
  validated_.insert(key);
}

void InferenceServer::Submit(const std::shared_ptr<ServerRequest>& req) {
  if (closed_) throw ServerError(ServerError::kClosed, "the inference server is closed");
  Validate(*req);
  req->rows = req->feeds[0].shape[0];
  std::vector<int64_t> sig;
  for (const auto& f : req->feeds) sig.insert(sig.end(), f.shape.begin() + 1, f.shape.end()), sig.push_back(-1);

  std::unique_lock<std::mutex> lock(mu_);
  if (closed_) throw ServerError(ServerError::kClosed, "the inference server is closed");
  const std::string tag = req->version.empty() ? version_order_.back() : req->version;
  auto vit = versions_.find(tag);
  if (vit == versions_.end()) {
    std::string known;
    for (const auto& t : version_order_) known += (known.empty() ? "'" : ", '") + t + "'";
    Fail(StatusCode::kInput, "unknown weight version '", tag, "'; the server has ", known);
  }
  Actor* a = nullptr;
  auto ait = actors_.find(req->actor);
  if (ait != actors_.end()) a = &ait->second;
  if (a && !state_.empty()) {
    KAIWU_CHECK(a->queued + a->running == 0, StatusCode::kInput, "actor ", req->actor,
                " already has a request in flight; a recurrent actor steps one request at a time");
    KAIWU_CHECK(!a->state || a->rows == req->rows, StatusCode::kInput, "actor ", req->actor,
                " keeps state for ", a->rows, " rows but sent ", req->rows,
                "; release (or reset) it before changing its row count");
  }
  while (queued_rows_ + req->rows > opt_.max_queue_rows) {
    if (!opt_.queue_block)
      throw ServerError(ServerError::kQueueFull,
                        "the server queue is full (" + std::to_string(queued_rows_) + " rows queued, max_queue_rows=" +
                            std::to_string(opt_.max_queue_rows) + ")");
    space_cv_.wait(lock);
    if (closed_) throw ServerError(ServerError::kClosed, "the inference server is closed");
    vit = versions_.find(tag);
    KAIWU_CHECK(vit != versions_.end(), StatusCode::kInput, "weight version '", tag,
                "' was removed while the request waited for queue space");
    ait = actors_.find(req->actor);
    a = ait == actors_.end() ? nullptr : &ait->second;
  }
  if (!a) {
    a = &actors_[req->actor];
    a->serial = ++actor_serial_;
  }
  a->rows = req->rows;
  req->actor_serial = a->serial;
  req->weights = vit->second.weights;
  req->version_tag = tag;
  req->enqueued = Clock::now();
  if (a->queued++ == 0) ++queued_actors_;
  queued_rows_ += req->rows;
  Queue& q = queues_[{req->weights.get(), sig}];
  const bool first = q.reqs.empty();
  q.reqs.push_back(req);
  q.rows += req->rows;
  // Wake a worker only when this request can change its decision: a new
  // deadline (first request of a queue), a full batch, or every actor waiting.
  // Otherwise the idle workers' deadline stands and a wake-up would be wasted.
  if (first || q.rows >= opt_.max_batch || queued_actors_ + running_actors_ >= static_cast<int>(actors_.size()))
    work_cv_.notify_one();
}

int InferenceServer::Warmup() {
  if (closed_) throw ServerError(ServerError::kClosed, "the inference server is closed");
  if (!opt_.pad_batches) return 0;
  const auto& ins = session_->inputs();
  for (const IOInfo& io : feed_inputs_) {
    if (!io.has_shape || io.dims.empty()) return 0;
    for (size_t d = 1; d < io.dims.size(); ++d)
      if (io.dims[d] < 0) return 0;
  }
  for (const StateSpec& st : state_) {
    const Shape& dims = ins[st.in_index].dims;
    if (dims.size() <= static_cast<size_t>(st.in_axis)) return 0;
    for (size_t d = 0; d < dims.size(); ++d)
      if (static_cast<int>(d) != st.in_axis && dims[d] < 0) return 0;
  }
  std::shared_ptr<const WeightSet> weights;
  {
    std::lock_guard<std::mutex> lock(mu_);
    weights = versions_.at(version_order_.back()).weights;
  }
  int sizes = 0;
  for (int64_t rows = 1;;) {
    const int64_t S = Bucket(rows);
    std::vector<Tensor> zeros;
    std::vector<TensorView> feeds(ins.size());
    auto add = [&](int index, DType dtype, Shape shape) {
      zeros.emplace_back(dtype, std::move(shape));
      std::memset(zeros.back().data(), 0, zeros.back().bytes());
      feeds[index] = TensorView{dtype, zeros.back().shape(), zeros.back().data()};
    };
    zeros.reserve(feed_inputs_.size() + state_.size());
    for (size_t i = 0; i < feed_inputs_.size(); ++i) {
      Shape s = feed_inputs_[i].dims;
      s[0] = S;
      add(feed_index_[i], feed_inputs_[i].dtype, s);
    }
    for (const StateSpec& st : state_) {
      Shape s = ins[st.in_index].dims;
      s[st.in_axis] = S;
      add(st.in_index, st.dtype, s);
    }
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
  auto it = actors_.find(actor);
  if (it != actors_.end()) it->second.state.reset();
}

void InferenceServer::Release(int64_t actor) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = actors_.find(actor);
  if (it == actors_.end()) return;
  if (it->second.queued > 0) --queued_actors_;
  if (it->second.running > 0) --running_actors_;
  actors_.erase(it);
  work_cv_.notify_all();  // fewer connected actors may complete a batch
}

void InferenceServer::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  // The wait for more actors counts from a queue's first request, or from when
  // this worker came free if that is later: requests that queued behind a
  // running batch still give that batch's actors, about to step again, up to
  // max_wait_us to join them. Otherwise the actors settle into groups that
  // alternate in half-size batches (each group queues while the other runs).
  Clock::time_point free_since = Clock::now();
  while (!closed_) {
    const auto now = Clock::now();
    const bool all_waiting = queued_actors_ > 0 &&
                             queued_actors_ + running_actors_ >= static_cast<int>(actors_.size());
    auto best = queues_.end();
    Clock::time_point deadline = Clock::time_point::max();
    for (auto it = queues_.begin(); it != queues_.end(); ++it) {
      if (it->second.reqs.empty()) continue;
      auto first = it->second.reqs.front()->enqueued;
      auto due = std::max(first, free_since) + std::chrono::microseconds(opt_.max_wait_us);
      bool ready = all_waiting || it->second.rows >= opt_.max_batch || due <= now;
      if (ready && (best == queues_.end() || first < best->second.reqs.front()->enqueued)) best = it;
      deadline = std::min(deadline, due);
    }
    if (best == queues_.end()) {
      if (deadline == Clock::time_point::max()) work_cv_.wait(lock);
      else work_cv_.wait_until(lock, deadline);
      continue;
    }
    std::vector<std::shared_ptr<ServerRequest>> batch;
    std::vector<std::shared_ptr<std::vector<Tensor>>> states;
    int64_t rows = 0;
    Queue& q = best->second;
    while (!q.reqs.empty() && rows + q.reqs.front()->rows <= opt_.max_batch) {
      auto r = q.reqs.front();
      q.reqs.pop_front();
      q.rows -= r->rows;
      rows += r->rows;
      queued_rows_ -= r->rows;
      auto ait = actors_.find(r->actor);
      std::shared_ptr<std::vector<Tensor>> st;
      if (ait != actors_.end() && ait->second.serial == r->actor_serial) {
        Actor& a = ait->second;
        if (--a.queued == 0) --queued_actors_;
        if (a.running++ == 0) ++running_actors_;
        if (!state_.empty() && !a.state) {
          a.state = std::make_shared<std::vector<Tensor>>();
          for (const auto& s : state_) {
            Tensor t(s.dtype, Shape{s.outer, r->rows, s.inner});
            std::memset(t.data(), 0, t.bytes());
            a.state->push_back(std::move(t));
          }
        }
        st = a.state;
      }
      if (!st && !state_.empty()) {  // actor released while queued: run from zeros
        st = std::make_shared<std::vector<Tensor>>();
        for (const auto& s : state_) {
          Tensor t(s.dtype, Shape{s.outer, r->rows, s.inner});
          std::memset(t.data(), 0, t.bytes());
          st->push_back(std::move(t));
        }
      }
      batch.push_back(std::move(r));
      states.push_back(std::move(st));
    }
    if (q.reqs.empty()) queues_.erase(best);
    running_requests_ += static_cast<int>(batch.size());
    space_cv_.notify_all();
    lock.unlock();
    RunBatch(batch, states);
    lock.lock();
    running_requests_ -= static_cast<int>(batch.size());
    for (auto& r : batch) {
      auto ait = actors_.find(r->actor);
      if (ait != actors_.end() && ait->second.serial == r->actor_serial) {
        if (--ait->second.running == 0) --running_actors_;
      }
    }
    lock.unlock();
    for (auto& r : batch) FinishRequest(*r);
    batch.clear();
    lock.lock();
    free_since = Clock::now();
  }
}

std::vector<int> InferenceServer::OutputAxes(const std::vector<TensorView>& feeds) {
  std::vector<int64_t> key;
  for (size_t i = 0; i < feed_index_.size(); ++i) {
    const auto& s = feeds[feed_index_[i]].shape;
    key.insert(key.end(), s.begin() + 1, s.end());
    key.push_back(-1);
  }
  {
    std::lock_guard<std::mutex> lock(axes_mu_);
    auto it = out_axes_.find(key);
    if (it != out_axes_.end()) return it->second;
  }
  auto probe = [&](int64_t b) {
    std::vector<TensorView> p(feeds.size());
    for (size_t i = 0; i < feed_index_.size(); ++i) {
      Shape s = feeds[feed_index_[i]].shape;
      s[0] = b;
      p[feed_index_[i]] = TensorView{feeds[feed_index_[i]].dtype, s, nullptr};
    }
    for (const auto& st : state_) {
      Shape s = session_->inputs()[st.in_index].dims;
      s[st.in_axis] = b;
      p[st.in_index] = TensorView{st.dtype, s, nullptr};
    }
    return session_->OutputShapes(p);
  };
  auto a = probe(1), b = probe(2);
  std::vector<int> axes(a.size(), -1);
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k].shape.size() != b[k].shape.size()) continue;
    for (size_t d = 0; d < a[k].shape.size(); ++d)
      if (a[k].shape[d] == 1 && b[k].shape[d] == 2) {
        axes[k] = static_cast<int>(d);
        break;
      }
  }
  for (size_t k = 0; k < axes.size(); ++k) {
    int si = out_state_[k];
    if (si < 0) continue;
    const StateSpec& s = state_[si];
    Shape want = session_->inputs()[s.in_index].dims;
    want[s.in_axis] = 1;
    KAIWU_CHECK(axes[k] == s.in_axis && a[k].shape == want, StatusCode::kInput, "state output '",
                s.out_name, "' (shape ", ShapeToString(a[k].shape), " at batch 1, batch axis ",
                axes[k], ") does not match state input '", s.in_name, "' (", ShapeToString(want),
                ", batch axis ", s.in_axis, ")");
  }
  std::lock_guard<std::mutex> lock(axes_mu_);
  out_axes_[key] = axes;
  return axes;
}

std::vector<int> InferenceServer::OutputLayout(std::vector<TensorView>* at_one_row) {
  std::vector<TensorView> feeds(session_->inputs().size());
  for (size_t i = 0; i < feed_inputs_.size(); ++i) {
    const IOInfo& io = feed_inputs_[i];
    KAIWU_CHECK(io.has_shape && !io.dims.empty(), StatusCode::kInput, "input '", io.name,
                "' needs a declared shape with rows on axis 0");
    Shape s = io.dims;
    s[0] = 1;
    for (size_t d = 1; d < s.size(); ++d)
      KAIWU_CHECK(s[d] >= 0, StatusCode::kInput, "input '", io.name, "': dimension ", d,
                  " is not fixed; shared-memory clients need fixed per-row shapes");
    feeds[feed_index_[i]] = TensorView{io.dtype, s, nullptr};
  }
  for (const auto& st : state_) {
    Shape s = session_->inputs()[st.in_index].dims;
    s[st.in_axis] = 1;
    feeds[st.in_index] = TensorView{st.dtype, s, nullptr};
  }
  std::vector<int> axes = OutputAxes(feeds);
  *at_one_row = session_->OutputShapes(feeds);
  return axes;
}

int64_t InferenceServer::Slices(int64_t rows) const {
  if (!slice_pool_ || rows <= 1) return 1;
  // Each slice should carry enough work that handing it to a thread is cheap
  // next to running it; until a row's cost is known, one slice per thread.
  int64_t k = std::min<int64_t>(slice_pool_->num_threads(), rows);
  const double t = row_us_.load(std::memory_order_relaxed);
  if (t > 0 && opt_.min_slice_us > 0)
    k = std::min<int64_t>(k, std::max<int64_t>(1, static_cast<int64_t>(rows * t / opt_.min_slice_us)));
  return k;
}

void InferenceServer::RunBatch(std::vector<std::shared_ptr<ServerRequest>>& batch,
                               std::vector<std::shared_ptr<std::vector<Tensor>>>& states) {
  const auto t0 = Clock::now();
  bool sliced = false;
  try {
    sliced = RunGroup(batch, states, 0, batch.size());
  } catch (...) {
    if (batch.size() == 1) {
      batch[0]->error = std::current_exception();
    } else {
      // Isolate the failure: each request alone, so only bad ones fail.
      for (size_t i = 0; i < batch.size(); ++i) {
        try {
          RunGroup(batch, states, i, i + 1);
        } catch (...) {
          batch[i]->error = std::current_exception();
        }
      }
    }
  }
  const auto t1 = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  int64_t rows = 0;
  ++st_batches_;
  if (sliced) ++st_sliced_;
  st_run_us_ += std::chrono::duration<double, std::micro>(t1 - t0).count();
  for (auto& r : batch) {
    rows += r->rows;
    ++st_requests_;
    st_rows_ += r->rows;
    if (r->error) ++st_failed_;
    float w = std::chrono::duration<float, std::micro>(t0 - r->enqueued).count();
    if (st_wait_.size() < (1u << 16)) st_wait_.push_back(w);
    else st_wait_[st_wait_pos_++ & 0xFFFF] = w;
    auto vit = versions_.find(r->version_tag);
    if (vit != versions_.end()) {
      ++vit->second.requests;
      vit->second.rows += r->rows;
    }
  }
  ++st_hist_[std::min<int64_t>(rows, opt_.max_batch)];
}

bool InferenceServer::RunGroup(std::vector<std::shared_ptr<ServerRequest>>& batch,
                               std::vector<std::shared_ptr<std::vector<Tensor>>>& states,
                               size_t begin, size_t end) {
  thread_local Scratch scratch;
  const auto& ins = session_->inputs();
  int64_t rows = 0;
  for (size_t j = begin; j < end; ++j) rows += batch[j]->rows;
  // k slices of S rows (the last one shorter without padding) run side by
  // side, one thread each; or one run of S = Bucket(rows) rows on all threads.
  int64_t k = Slices(rows), S = Bucket(rows);
  if (k > 1) {
    S = (rows + k - 1) / k;
    if (opt_.pad_batches) S = Bucket(S);
    k = (rows + S - 1) / S;
  }
  const int64_t B = k * S;  // rows gathered, padding included
  auto slice_rows = [&](int64_t s) { return opt_.pad_batches ? S : std::min(S, rows - s * S); };
  const ServerRequest& first = *batch[begin];

  // Observations: rows on axis 0, slice after slice.
  std::vector<char*> obs(feed_index_.size());
  std::vector<size_t> obs_row_bytes(feed_index_.size());
  for (size_t i = 0; i < feed_index_.size(); ++i) {
    const size_t row_bytes = first.feeds[i].bytes() / first.rows;
    char* dst = static_cast<char*>(scratch.Get(i, row_bytes * B));
    obs[i] = dst;
    obs_row_bytes[i] = row_bytes;
    for (size_t j = begin; j < end; ++j) {
      std::memcpy(dst, batch[j]->feeds[i].data, row_bytes * batch[j]->rows);
      dst += row_bytes * batch[j]->rows;
    }
    std::memset(dst, 0, row_bytes * (B - rows));
  }
  // Recurrent state: per-actor [outer, n, inner] into one [outer, n_s, inner]
  // block per slice (slice s starts at s * outer * S rows).
  std::vector<char*> st_base(state_.size());
  for (size_t k2 = 0; k2 < state_.size(); ++k2) {
    const StateSpec& s = state_[k2];
    const size_t inner_bytes = s.inner * DTypeSize(s.dtype);
    char* base = static_cast<char*>(scratch.Get(feed_index_.size() + k2, s.outer * B * inner_bytes));
    st_base[k2] = base;
    auto row_ptr = [&](int64_t r, int64_t o) {
      const int64_t sl = r / S, n_s = slice_rows(sl);
      return base + ((sl * s.outer * S) + o * n_s + (r - sl * S)) * inner_bytes;
    };
    int64_t r0 = 0;
    for (size_t j = begin; j < end; ++j) {
      const ServerRequest& r = *batch[j];
      const int64_t n = r.rows;
      char* st = static_cast<char*>((*states[j])[k2].data());
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
    if (opt_.pad_batches)  // pad rows are fed too: zero state
      for (int64_t r = rows; r < B; ++r)
        for (int64_t o = 0; o < s.outer; ++o) std::memset(row_ptr(r, o), 0, inner_bytes);
  }
  auto slice_feeds = [&](int64_t sl) {
    const int64_t n_s = slice_rows(sl);
    std::vector<TensorView> feeds(ins.size());
    for (size_t i = 0; i < feed_index_.size(); ++i) {
      TensorView v{first.feeds[i].dtype, first.feeds[i].shape, obs[i] + sl * S * obs_row_bytes[i]};
      v.shape[0] = n_s;
      feeds[feed_index_[i]] = v;
    }
    for (size_t k2 = 0; k2 < state_.size(); ++k2) {
      const StateSpec& s = state_[k2];
      TensorView v{s.dtype, ins[s.in_index].dims,
                   st_base[k2] + sl * s.outer * S * s.inner * DTypeSize(s.dtype)};
      v.shape[s.in_axis] = n_s;
      feeds[s.in_index] = v;
    }
    return feeds;
  };
  const std::vector<int> axes = OutputAxes(slice_feeds(0));
  std::vector<RunResult> res(k);
  if (k == 1) {
    res[0] = session_->Run(slice_feeds(0), nullptr, first.weights.get());
  } else {
    std::vector<std::exception_ptr> errors(k);
    std::vector<double> us(k, 0.0);
    slice_pool_->ParallelFor(k, 1e12, [&](int64_t s0, int64_t s1) {
      for (int64_t sl = s0; sl < s1; ++sl) {
        const auto a = Clock::now();
        try {
          res[sl] = session_->Run(slice_feeds(sl), nullptr, first.weights.get(), /*single_thread=*/true);
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
    const double per_row = sum / static_cast<double>(B);
    const double old = row_us_.load(std::memory_order_relaxed);
    row_us_.store(old > 0 ? 0.9 * old + 0.1 * per_row : per_row, std::memory_order_relaxed);
  }

  // Scatter: request rows [a, a + n) may span slices.
  int64_t a = 0;
  for (size_t j = begin; j < end; ++j) {
    ServerRequest& r = *batch[j];
    const int64_t n = r.rows;
    const int64_t s_first = a / S, s_last = (a + n - 1) / S;
    r.outputs.assign(axes.size(), TensorView{});
    r.owners.assign(axes.size(), nullptr);
    for (size_t k2 = 0; k2 < axes.size(); ++k2) {
      const TensorView& o = res[s_first].outputs[k2];
      const int ax = axes[k2];
      if (ax < 0) {  // no batch axis: everyone gets the whole output
        r.outputs[k2] = o;
        r.owners[k2] = res[s_first].owner;
        continue;
      }
      const int64_t outer = Prod(o.shape, 0, ax);
      const size_t inner_bytes = Prod(o.shape, ax + 1, o.shape.size()) * DTypeSize(o.dtype);
      // Rows [a, a + n) of this output into dst laid out [outer, n, inner].
      auto copy_rows = [&](char* dst) {
        for (int64_t sl = s_first; sl <= s_last; ++sl) {
          const int64_t lo = std::max(a, sl * S), hi = std::min(a + n, (sl + 1) * S);
          const int64_t n_s = slice_rows(sl);
          const char* src = static_cast<const char*>(res[sl].outputs[k2].data);
          for (int64_t q = 0; q < outer; ++q)
            std::memcpy(dst + (q * n + lo - a) * inner_bytes, src + (q * n_s + lo - sl * S) * inner_bytes,
                        (hi - lo) * inner_bytes);
        }
      };
      TensorView v{o.dtype, o.shape, nullptr};
      v.shape[ax] = n;
      if (outer == 1 && s_first == s_last) {
        v.data = static_cast<char*>(o.data) + (a - s_first * S) * inner_bytes;
        r.owners[k2] = res[s_first].owner;
      } else {
        auto t = std::make_shared<Tensor>(o.dtype, v.shape);
        copy_rows(static_cast<char*>(t->data()));
        v.data = t->data();
        r.owners[k2] = t;
      }
      r.outputs[k2] = v;
      const int si = out_state_[k2];
      if (si >= 0) copy_rows(static_cast<char*>((*states[j])[si].data()));  // next state
    }
    a += n;
  }
  return k > 1;
}

void InferenceServer::AddVersion(const std::string& tag,
                                 const std::map<std::string, TensorView>& weights, bool strict,
                                 bool check_finite, const std::string& base) {
  KAIWU_CHECK(!tag.empty(), StatusCode::kInput, "a version tag must not be empty");
  std::shared_ptr<const WeightSet> base_ws;
  {
    std::lock_guard<std::mutex> lock(mu_);
    KAIWU_CHECK(!versions_.count(tag), StatusCode::kInput, "weight version '", tag,
                "' exists; refit it or remove it first");
    const std::string b = base.empty() ? version_order_.back() : base;
    auto it = versions_.find(b);
    KAIWU_CHECK(it != versions_.end(), StatusCode::kInput, "unknown base version '", b, "'");
    base_ws = it->second.weights;
  }
  auto ws = session_->BuildWeights(weights, strict, check_finite, nullptr, base_ws.get());
  std::lock_guard<std::mutex> lock(mu_);
  KAIWU_CHECK(!versions_.count(tag), StatusCode::kInput, "weight version '", tag,
              "' exists; refit it or remove it first");
  versions_[tag].weights = std::move(ws);
  version_order_.push_back(tag);
}

void InferenceServer::RemoveVersion(const std::string& tag) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = versions_.find(tag);
  KAIWU_CHECK(it != versions_.end(), StatusCode::kInput, "unknown weight version '", tag, "'");
  KAIWU_CHECK(versions_.size() > 1, StatusCode::kInput, "cannot remove the last weight version");
  versions_.erase(it);  // queued requests keep their own reference to the weights
  version_order_.erase(std::find(version_order_.begin(), version_order_.end(), tag));
}

Session::RefitReport InferenceServer::Refit(const std::map<std::string, TensorView>& weights,
                                            const std::string& tag, bool strict,
                                            bool check_finite) {
  std::lock_guard<std::mutex> refit_lock(refit_mu_);
  std::shared_ptr<const WeightSet> base_ws;
  std::string t;
  {
    std::lock_guard<std::mutex> lock(mu_);
    t = tag.empty() ? version_order_.back() : tag;
    auto it = versions_.find(t);
    KAIWU_CHECK(it != versions_.end(), StatusCode::kRefit, "unknown weight version '", t, "'");
    base_ws = it->second.weights;
  }
  Session::RefitReport report;
  auto ws = session_->BuildWeights(weights, strict, check_finite, &report, base_ws.get());
  std::lock_guard<std::mutex> lock(mu_);
  auto it = versions_.find(t);
  KAIWU_CHECK(it != versions_.end(), StatusCode::kRefit, "weight version '", t,
              "' was removed during the refit");
  it->second.weights = std::move(ws);
  return report;
}

std::vector<std::string> InferenceServer::Versions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_order_;
}

std::string InferenceServer::Latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_order_.back();
}

ServerStats InferenceServer::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  ServerStats s;
  s.elapsed_s = std::chrono::duration<double>(Clock::now() - stats_start_).count();
  s.requests = st_requests_;
  s.rows = st_rows_;
  s.batches = st_batches_;
  s.sliced_batches = st_sliced_;
  s.failed = st_failed_;
  s.batch_hist = st_hist_;
  s.run_mean_us = st_batches_ ? st_run_us_ / st_batches_ : 0;
  if (!st_wait_.empty()) {
    std::vector<float> w = st_wait_;
    auto pct = [&](double p) {
      size_t i = std::min(w.size() - 1, static_cast<size_t>(p * (w.size() - 1) + 0.5));
      std::nth_element(w.begin(), w.begin() + i, w.end());
      return static_cast<double>(w[i]);
    };
    s.wait_p50_us = pct(0.5);
    s.wait_p99_us = pct(0.99);
  }
  for (const auto& [tag, v] : versions_) s.per_version[tag] = {v.requests, v.rows};
  s.connected = static_cast<int>(actors_.size());
  for (const auto& [k, q] : queues_) s.queued += static_cast<int>(q.reqs.size());
  s.running = running_requests_;
  return s;
}

void InferenceServer::ResetStats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_start_ = Clock::now();
  st_requests_ = st_rows_ = st_batches_ = st_failed_ = st_sliced_ = 0;
  st_run_us_ = 0;
  std::fill(st_hist_.begin(), st_hist_.end(), 0);
  st_wait_.clear();
  st_wait_pos_ = 0;
  for (auto& [tag, v] : versions_) v.requests = v.rows = 0;
}

void InferenceServer::Close() {
  std::vector<std::shared_ptr<ServerRequest>> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closed_.exchange(true)) {
      for (auto& [k, q] : queues_)
        for (auto& r : q.reqs) failed.push_back(r);
      queues_.clear();
      queued_rows_ = 0;
      queued_actors_ = 0;
      for (auto& [id, a] : actors_) a.queued = 0;
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
