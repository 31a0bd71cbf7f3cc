// Python bindings of the inference server (kaiwu_infer._core._InferenceServer,
// _ShmClient, _ServerTicket, _CompletionQueue) and its two exception classes.
#include <fcntl.h>
#include <unistd.h>

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "bindings.h"
#include "kaiwu/session.h"
#include "runtime/server.h"
#include "runtime/server_shm.h"

namespace kaiwu {
namespace python {

namespace {

PyObject* g_closed_error = nullptr;
PyObject* g_queue_full_error = nullptr;

constexpr int64_t kMaxActorId = int64_t(1) << 62;  // larger ids are the shm clients'

Session* SessionOf(const py::object& obj) { return SessionFromPython(obj); }

std::vector<uint8_t> DoneFlags(const py::object& done) {
  if (done.is_none()) return {};
  if (py::isinstance<py::bool_>(done) || py::isinstance<py::int_>(done)) {
    if (done.cast<bool>()) return {1};
    return {};
  }
  py::array_t<bool, py::array::c_style | py::array::forcecast> a(done);
  std::vector<uint8_t> out(a.size());
  bool any = false;
  for (py::ssize_t i = 0; i < a.size(); ++i) any |= (out[i] = a.data()[i] ? 1 : 0);
  if (!any) return {};
  return out;
}

std::map<std::string, TensorView> WeightViews(const py::dict& weights, std::vector<py::array>* keep) {
  std::map<std::string, TensorView> views;
  keep->reserve(weights.size());
  for (auto item : weights) {
    std::string name = TextFromPython(item.first);
    keep->emplace_back();
    views[name] = ArrayView(item.second, "weight '" + name + "'", &keep->back(), StatusCode::kRefit);
  }
  return views;
}

// What an in-flight Python request owns.
struct TicketShared {
  std::shared_ptr<ServerRequest> req;
  std::mutex mu;
  bool fired = false;
  std::vector<py::object> callbacks;
};

class PyTicket {
 public:
  PyTicket(std::shared_ptr<TicketShared> t, const InferenceServer* server, std::vector<py::array> keep)
      : t_(std::move(t)), server_(server), keep_(std::move(keep)) {}
  ~PyTicket() {
    if (!t_->req->IsDone()) {
      py::gil_scoped_release release;
      t_->req->Wait(-1);
    }
  }
  bool done() { return t_->req->IsDone(); }
  bool wait(double timeout) {
    py::gil_scoped_release release;
    return t_->req->Wait(timeout);
  }
  py::dict result(double timeout) {
    if (!wait(timeout)) throw py::value_error("timeout");  // Python side turns it into TimeoutError
    return Outputs(*t_->req, server_->outputs());
  }
  // Calls fn(self) on completion, from the server thread (holding the GIL), or now.
  void add_callback(py::object fn, py::object self) {
    {
      std::lock_guard<std::mutex> lock(t_->mu);
      if (!t_->fired) {
        t_->callbacks.push_back(py::make_tuple(fn, self));
        return;
      }
    }
    fn(self);
  }

  static py::dict Outputs(ServerRequest& r, const std::vector<IOInfo>& outs) {
    if (r.error) std::rethrow_exception(r.error);
    py::dict d;
    for (size_t k = 0; k < r.outputs.size(); ++k) d[py::str(outs[k].name)] = WrapOwned(r.outputs[k], r.owners[k]);
    return d;
  }

 private:
  std::shared_ptr<TicketShared> t_;
  const InferenceServer* server_;
  std::vector<py::array> keep_;  // the feed arrays, read until the request is done
};

class PyServer {
 public:
  PyServer(py::object session, int max_batch, int64_t max_wait_us,
           std::vector<std::pair<std::string, std::string>> state,
           std::map<std::string, int> state_batch_axis, int workers, int64_t max_queue_rows,
           bool queue_block, bool pad_batches, std::string base_version, bool split_batches,
           double min_slice_us, int copy_threads)
      : session_obj_(session) {
    Session* s = SessionOf(session);
    ServerOptions o;
    o.max_batch = max_batch;
    o.max_wait_us = max_wait_us;
    o.state = std::move(state);
    o.state_batch_axis = std::move(state_batch_axis);
    o.workers = workers;
    o.max_queue_rows = max_queue_rows;
    o.queue_block = queue_block;
    o.pad_batches = pad_batches;
    o.split_batches = split_batches;
    o.min_slice_us = min_slice_us;
    o.copy_threads = copy_threads;
    o.base_version = std::move(base_version);
    std::shared_ptr<Session> shared(s, [](Session*) {});  // the Python object owns it
    server_ = std::make_shared<InferenceServer>(shared, o);
    for (size_t i = 0; i < server_->feed_inputs().size(); ++i)
      feed_index_[server_->feed_inputs()[i].name] = static_cast<int>(i);
    for (const auto& [in, out] : server_->options().state) state_names_.insert(in);
  }
  ~PyServer() {
    py::gil_scoped_release release;
    CloseNoGil();
  }

  std::shared_ptr<ServerRequest> MakeRequest(int64_t actor, const py::dict& feeds, const py::object& done,
                                             const py::object& version, std::vector<py::array>* keep) {
    if (actor < 0 || actor >= kMaxActorId)
      ThrowPython(StatusCode::kInput, "actor_id must be in [0, 2**62)");
    auto req = std::make_shared<ServerRequest>();
    req->actor = actor;
    const size_t n = server_->feed_inputs().size();
    req->feeds.resize(n);
    keep->resize(n);
    std::vector<bool> seen(n, false);
    for (auto item : feeds) {
      std::string name = TextFromPython(item.first);
      auto it = feed_index_.find(name);
      if (it == feed_index_.end()) {
        if (state_names_.count(name))
          ThrowPython(StatusCode::kInput, "input '" + name + "' is recurrent state kept by the server; "
                                          "do not feed it (use done=True or reset() to zero it)");
        ThrowPython(StatusCode::kInput, "unknown input '" + name + "'; the server's feed inputs are: " + FeedNames());
      }
      req->feeds[it->second] = ArrayView(item.second, "input '" + name + "'", &(*keep)[it->second]);
      seen[it->second] = true;
    }
    for (size_t i = 0; i < n; ++i)
      if (!seen[i]) ThrowPython(StatusCode::kInput, "missing input '" + server_->feed_inputs()[i].name + "'");
    req->done = DoneFlags(done);
    if (!version.is_none()) req->version = TextFromPython(version);
    return req;
  }

  py::dict Infer(int64_t actor, py::dict feeds, py::object done, py::object version) {
    std::vector<py::array> keep;
    auto req = MakeRequest(actor, feeds, done, version, &keep);
    {
      py::gil_scoped_release release;
      server_->Submit(req);
      req->Wait(-1);
    }
    return PyTicket::Outputs(*req, server_->outputs());
  }

  PyTicket* Submit(int64_t actor, py::dict feeds, py::object done, py::object version) {
    auto t = std::make_shared<TicketShared>();
    std::vector<py::array> keep;
    t->req = MakeRequest(actor, feeds, done, version, &keep);
    std::weak_ptr<TicketShared> weak = t;
    t->req->on_done = [weak](ServerRequest&) {
      auto t = weak.lock();
      if (!t) return;
      std::vector<py::object> cbs;
      {
        std::lock_guard<std::mutex> lock(t->mu);
        t->fired = true;
        if (t->callbacks.empty()) return;
      }
      if (!Py_IsInitialized()) return;
      py::gil_scoped_acquire gil;
      {
        std::lock_guard<std::mutex> lock(t->mu);
        cbs.swap(t->callbacks);
      }
      for (auto& c : cbs) {
        try {
          py::tuple tup = c;
          tup[0](tup[1]);
        } catch (py::error_already_set& e) {
          e.discard_as_unraisable("kaiwu_infer server future callback");
        }
      }
      cbs.clear();
    };
    {
      py::gil_scoped_release release;
      server_->Submit(t->req);
    }
    return new PyTicket(t, server_.get(), std::move(keep));
  }

  void AddVersion(const std::string& tag, py::dict weights, bool strict, bool check_finite,
                  const std::string& base) {
    std::vector<py::array> keep;
    auto views = WeightViews(weights, &keep);
    py::gil_scoped_release release;
    server_->AddVersion(tag, views, strict, check_finite, base);
  }

  py::tuple Refit(py::dict weights, const std::string& tag, bool strict, bool check_finite) {
    std::vector<py::array> keep;
    auto views = WeightViews(weights, &keep);
    Session::RefitReport report;
    {
      py::gil_scoped_release release;
      report = server_->Refit(views, tag, strict, check_finite);
    }
    return py::make_tuple(report.updated, report.ignored);
  }

  py::dict Stats() const {
    ServerStats s = server_->Stats();
    py::dict d;
    d["elapsed_s"] = s.elapsed_s;
    d["requests"] = s.requests;
    d["rows"] = s.rows;
    d["batches"] = s.batches;
    d["sliced_batches"] = s.sliced_batches;
    d["failed"] = s.failed;
    d["rows_per_s"] = s.elapsed_s > 0 ? s.rows / s.elapsed_s : 0.0;
    d["requests_per_s"] = s.elapsed_s > 0 ? s.requests / s.elapsed_s : 0.0;
    d["mean_batch_rows"] = s.batches ? double(s.rows) / s.batches : 0.0;
    py::dict hist;
    for (size_t i = 0; i < s.batch_hist.size(); ++i)
      if (s.batch_hist[i]) hist[py::int_(i)] = s.batch_hist[i];
    d["batch_rows_hist"] = hist;
    d["queue_wait_p50_us"] = s.wait_p50_us;
    d["queue_wait_p99_us"] = s.wait_p99_us;
    d["run_mean_us"] = s.run_mean_us;
    d["gather_mean_us"] = s.gather_mean_us;
    d["session_mean_us"] = s.session_mean_us;
    d["scatter_mean_us"] = s.scatter_mean_us;
    d["finish_mean_us"] = s.finish_mean_us;
    d["gathered_bytes"] = s.gathered_bytes;
    d["parallel_gathers"] = s.parallel_gathers;
    d["pinned_inputs"] = s.pinned_inputs;
    py::dict pv;
    for (const auto& [tag, c] : s.per_version) pv[py::str(tag)] = py::dict(py::arg("requests") = c.first, py::arg("rows") = c.second);
    d["versions"] = pv;
    d["connected_actors"] = s.connected;
    d["queued_requests"] = s.queued;
    d["running_requests"] = s.running;
    int shm_clients = 0;
    for (const auto& sh : shm_) shm_clients += sh->clients();
    d["shm_clients"] = shm_clients;
    return d;
  }

  std::string ServeShm(const std::string& name, int max_clients, int max_rows, double client_timeout) {
    if (server_->closed()) throw ServerError(ServerError::kClosed, "the inference server is closed");
    std::unique_ptr<ShmServer> s;
    {
      py::gil_scoped_release release;
      s = std::make_unique<ShmServer>(server_, name, max_clients, max_rows, client_timeout);
    }
    std::string n = s->name();
    shm_.push_back(std::move(s));
    return n;
  }

  void Close() {
    py::gil_scoped_release release;
    CloseNoGil();
  }

  InferenceServer& server() { return *server_; }
  const std::vector<IOInfo>& outputs() const { return server_->outputs(); }
  std::vector<std::string> FeedInputNames() const {
    std::vector<std::string> v;
    for (const auto& io : server_->feed_inputs()) v.push_back(io.name);
    return v;
  }
  std::vector<int> StateAxes() const {
    std::vector<int> v;
    for (size_t k = 0; k < server_->options().state.size(); ++k) v.push_back(server_->state_batch_axis(k));
    return v;
  }

 private:
  void CloseNoGil() {
    server_->Close();
    for (auto& s : shm_) s->Close();
  }
  std::string FeedNames() const {
    std::string s;
    for (const auto& io : server_->feed_inputs()) s += (s.empty() ? "'" : ", '") + io.name + "'";
    return s;
  }

  py::object session_obj_;
  std::shared_ptr<InferenceServer> server_;
  std::vector<std::unique_ptr<ShmServer>> shm_;
  std::map<std::string, int> feed_index_;
  std::set<std::string> state_names_;
};

// Completions of requests submitted for one asyncio event loop. Server threads
// never take the GIL here: they append the request's token to a list and, on the
// first completion since the last drain, write one byte to a pipe the loop
// watches (loop.add_reader). The loop's thread then drains every finished
// request at once, so a batch of N actors costs one wake-up, not N GIL hand-offs.
struct CompletionCore {
  std::mutex mu;
  std::vector<uint64_t> done;
  bool signaled = false;
  int rfd = -1, wfd = -1;

  CompletionCore() {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error(std::string("completion queue: pipe failed: ") + std::strerror(errno));
    rfd = fds[0];
    wfd = fds[1];
    for (int fd : fds) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
      fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
  }
  ~CompletionCore() {
    close(rfd);
    close(wfd);
  }
  void Push(uint64_t token) {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mu);
      done.push_back(token);
      wake = !signaled;
      signaled = true;
    }
    if (wake) {
      const char byte = 1;
      while (write(wfd, &byte, 1) < 0 && errno == EINTR) {
      }
    }
  }
  std::vector<uint64_t> Take() {
    std::vector<uint64_t> out;
    std::lock_guard<std::mutex> lock(mu);
    out.swap(done);
    signaled = false;
    char buf[64];
    while (read(rfd, buf, sizeof(buf)) > 0) {
    }
    return out;
  }
};

// The Python exception object a failed request's error translates to.
py::object ErrorObject(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (...) {
    py::detail::try_translate_exceptions();
    py::error_already_set e;
    return e.value();
  }
}

class PyCompletionQueue {
 public:
  PyCompletionQueue() : core_(std::make_shared<CompletionCore>()) {}
  ~PyCompletionQueue() {
    // The server reads the feed arrays until a request is done.
    std::vector<std::shared_ptr<ServerRequest>> live;
    for (auto& [token, p] : pending_) live.push_back(p.req);
    if (!live.empty()) {
      py::gil_scoped_release release;
      for (auto& r : live) r->Wait(-1);
    }
  }

  int fd() const { return core_->rfd; }
  size_t pending() const { return pending_.size(); }

  // Queues one step; bad feeds, a closed server or a full queue raise here.
  void Submit(PyServer& server, uint64_t token, int64_t actor, const py::dict& feeds, const py::object& done,
              const py::object& version) {
    if (pending_.count(token)) ThrowPython(StatusCode::kInput, "completion token " + std::to_string(token) + " is in use");
    Pending p;
    p.req = server.MakeRequest(actor, feeds, done, version, &p.keep);
    p.req->on_done = [core = core_, token](ServerRequest&) { core->Push(token); };
    auto req = p.req;
    pending_.emplace(token, std::move(p));
    try {
      py::gil_scoped_release release;
      server.server().Submit(req);
    } catch (...) {
      pending_.erase(token);
      throw;
    }
  }

  // Finished requests as (token, outputs dict) or (token, exception object).
  py::list Drain(const PyServer& server) {
    std::vector<uint64_t> done = core_->Take();
    py::list out;
    for (uint64_t token : done) {
      auto it = pending_.find(token);
      if (it == pending_.end()) continue;
      ServerRequest& r = *it->second.req;
      py::object value = r.error ? ErrorObject(r.error) : py::object(PyTicket::Outputs(r, server.outputs()));
      out.append(py::make_tuple(token, value));
      pending_.erase(it);
    }
    return out;
  }

 private:
  struct Pending {
    std::shared_ptr<ServerRequest> req;
    std::vector<py::array> keep;  // the feed arrays, read until the request is done
  };
  std::shared_ptr<CompletionCore> core_;
  std::unordered_map<uint64_t, Pending> pending_;
};

class PyShmClient {
 public:
  PyShmClient(const std::string& name, double timeout) {
    py::gil_scoped_release release;
    c_ = std::make_unique<ShmClient>(name, timeout);
  }
  py::dict Infer(py::object self, py::dict feeds, py::object done, py::object version, bool copy) {
    const auto& ins = c_->inputs();
    int64_t rows = -1;
    std::vector<bool> seen(ins.size(), false);
    for (auto item : feeds) {
      std::string name = TextFromPython(item.first);
      size_t i = 0;
      while (i < ins.size() && ins[i].name != name) ++i;
      if (i == ins.size()) ThrowPython(StatusCode::kInput, "unknown input '" + name + "'");
      py::array keep;
      TensorView v = ArrayView(item.second, "input '" + name + "'", &keep);
      const auto& f = ins[i];
      if (v.dtype != f.dtype)
        ThrowPython(StatusCode::kInput, "input '" + name + "': expected dtype " + DTypeName(f.dtype) +
                                            ", got " + DTypeName(v.dtype));
      Shape want = f.dims;
      bool ok = v.shape.size() == want.size() && !v.shape.empty();
      if (ok) want[0] = v.shape[0];
      if (!ok || v.shape != want) {
        want[0] = -1;
        ThrowPython(StatusCode::kInput, "input '" + name + "': expected shape " + ShapeToString(want) +
                                            " (rows on axis 0), got " + ShapeToString(v.shape));
      }
      if (rows < 0) rows = v.shape[0];
      if (v.shape[0] != rows) ThrowPython(StatusCode::kInput, "inputs disagree on the number of rows");
      if (rows > c_->max_rows() || rows < 1)
        ThrowPython(StatusCode::kInput, "a request must have 1.." + std::to_string(c_->max_rows()) +
                                            " rows, got " + std::to_string(rows));
      std::memcpy(c_->InputData(i), v.data, v.bytes());
      seen[i] = true;
    }
    for (size_t i = 0; i < ins.size(); ++i)
      if (!seen[i]) ThrowPython(StatusCode::kInput, "missing input '" + ins[i].name + "'");
    return Step(self, rows, done, version, copy);
  }
  py::dict Step(py::object self, int64_t rows, py::object done, py::object version, bool copy) {
    std::vector<uint8_t> d = DoneFlags(done);
    std::string ver = version.is_none() ? "" : TextFromPython(version);
    std::vector<TensorView> outs;
    {
      py::gil_scoped_release release;
      outs = c_->Step(rows, d, ver);
    }
    py::dict r;
    for (size_t k = 0; k < outs.size(); ++k) {
      const TensorView& v = outs[k];
      py::array a(ToNumpyDType(v.dtype), std::vector<py::ssize_t>(v.shape.begin(), v.shape.end()));
      if (copy) std::memcpy(a.mutable_data(), v.data, v.bytes());
      else a = py::array(ToNumpyDType(v.dtype), std::vector<py::ssize_t>(v.shape.begin(), v.shape.end()), v.data, self);
      r[py::str(c_->outputs()[k].name)] = a;
    }
    return r;
  }
  py::list InputViews(py::object self) {
    py::list l;
    for (size_t i = 0; i < c_->inputs().size(); ++i) {
      const auto& f = c_->inputs()[i];
      Shape s = f.dims;
      s[0] = c_->max_rows();
      l.append(py::array(ToNumpyDType(f.dtype), std::vector<py::ssize_t>(s.begin(), s.end()), c_->InputData(i), self));
    }
    return l;
  }
  ShmClient& client() { return *c_; }

 private:
  std::unique_ptr<ShmClient> c_;
};

}  // namespace

void BindServer(py::module_& m) {
  py::object base = m.attr("KaiwuError");
  g_closed_error = PyErr_NewExceptionWithDoc(
      "kaiwu_infer.ServerClosedError",
      "The inference server is closed: the request was queued when it closed, or came after.",
      base.ptr(), nullptr);
  g_queue_full_error = PyErr_NewExceptionWithDoc(
      "kaiwu_infer.QueueFullError", "The server queue is full and queue_full='raise'.", base.ptr(), nullptr);
  m.add_object("ServerClosedError", py::handle(g_closed_error));
  m.add_object("QueueFullError", py::handle(g_queue_full_error));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ServerError& e) {
      SetPythonError(e.kind() == ServerError::kClosed ? g_closed_error : g_queue_full_error,
                     e.what());
    }
  });

  py::class_<PyTicket>(m, "_ServerTicket")
      .def("done", &PyTicket::done)
      .def("wait", &PyTicket::wait, py::arg("timeout") = -1.0)
      .def("result", &PyTicket::result, py::arg("timeout") = -1.0)
      .def("add_callback", &PyTicket::add_callback);

  py::class_<PyServer>(m, "_InferenceServer")
      .def(py::init<py::object, int, int64_t, std::vector<std::pair<std::string, std::string>>,
                    std::map<std::string, int>, int, int64_t, bool, bool, std::string, bool, double, int>(),
           py::arg("session"), py::arg("max_batch"), py::arg("max_wait_us"), py::arg("state"),
           py::arg("state_batch_axis"), py::arg("workers"), py::arg("max_queue_rows"),
           py::arg("queue_block"), py::arg("pad_batches"), py::arg("base_version"),
           py::arg("split_batches") = true, py::arg("min_slice_us") = 30.0, py::arg("copy_threads") = 0)
      .def("infer", &PyServer::Infer, py::arg("actor_id"), py::arg("feeds"), py::arg("done") = false,
           py::arg("version") = py::none())
      .def("submit", &PyServer::Submit, py::arg("actor_id"), py::arg("feeds"), py::arg("done") = false,
           py::arg("version") = py::none())
      .def("warmup", [](PyServer& s) {
        py::gil_scoped_release release;
        return s.server().Warmup();
      })
      .def("reset", [](PyServer& s, int64_t a) { s.server().Reset(a); })
      .def("release", [](PyServer& s, int64_t a) { s.server().Release(a); })
      .def("add_version", &PyServer::AddVersion)
      .def("remove_version", [](PyServer& s, const std::string& t) { s.server().RemoveVersion(t); })
      .def("refit", &PyServer::Refit)
      .def_property_readonly("versions", [](PyServer& s) { return s.server().Versions(); })
      .def_property_readonly("latest", [](PyServer& s) { return s.server().Latest(); })
      .def_property_readonly("feed_inputs", &PyServer::FeedInputNames)
      .def_property_readonly("state_batch_axes", &PyServer::StateAxes)
      .def_property_readonly("closed", [](PyServer& s) { return s.server().closed(); })
      .def("stats", &PyServer::Stats)
      .def("reset_stats", [](PyServer& s) { s.server().ResetStats(); })
      .def("serve_shm", &PyServer::ServeShm)
      .def("close", &PyServer::Close);

  py::class_<PyCompletionQueue>(m, "_CompletionQueue")
      .def(py::init<>())
      .def_property_readonly("fd", &PyCompletionQueue::fd)
      .def_property_readonly("pending", &PyCompletionQueue::pending)
      .def("submit", &PyCompletionQueue::Submit, py::arg("server"), py::arg("token"), py::arg("actor_id"),
           py::arg("feeds"), py::arg("done") = false, py::arg("version") = py::none())
      .def("drain", &PyCompletionQueue::Drain, py::arg("server"));

  py::class_<PyShmClient>(m, "_ShmClient")
      .def(py::init<const std::string&, double>())
      .def("infer", [](py::object self, py::dict feeds, py::object done, py::object version, bool copy) {
        return self.cast<PyShmClient&>().Infer(self, feeds, done, version, copy);
      })
      .def("step", [](py::object self, int64_t rows, py::object done, py::object version, bool copy) {
        return self.cast<PyShmClient&>().Step(self, rows, done, version, copy);
      })
      .def("input_views", [](py::object self) { return self.cast<PyShmClient&>().InputViews(self); })
      .def_property_readonly("inputs", [](PyShmClient& c) {
        std::vector<std::string> v;
        for (const auto& f : c.client().inputs()) v.push_back(f.name);
        return v;
      })
      .def_property_readonly("outputs", [](PyShmClient& c) {
        std::vector<std::string> v;
        for (const auto& f : c.client().outputs()) v.push_back(f.name);
        return v;
      })
      .def_property_readonly("max_rows", [](PyShmClient& c) { return c.client().max_rows(); })
      .def_property_readonly("slot", [](PyShmClient& c) { return c.client().slot(); })
      .def("heartbeat", [](PyShmClient& c) { c.client().Heartbeat(); })
      .def("close", [](PyShmClient& c) { c.client().Close(); });
}

}  // namespace python
}  // namespace kaiwu
