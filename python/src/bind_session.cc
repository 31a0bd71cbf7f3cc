#include <pybind11/stl.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/device.h"
#include "bindings.h"
#include "core/memory_budget.h"
#include "kaiwu/session.h"

namespace kaiwu {
namespace python {

py::dtype ToNumpyDType(DType t) {
  switch (t) {
    case DType::kFloat32: return py::dtype::of<float>();
    case DType::kFloat64: return py::dtype::of<double>();
    case DType::kFloat16: return py::dtype("float16");
    case DType::kInt8: return py::dtype::of<int8_t>();
    case DType::kUInt8: return py::dtype::of<uint8_t>();
    case DType::kInt16: return py::dtype::of<int16_t>();
    case DType::kInt32: return py::dtype::of<int32_t>();
    case DType::kInt64: return py::dtype::of<int64_t>();
    case DType::kBool: return py::dtype::of<bool>();
    default: ThrowPython(StatusCode::kInternal, "no numpy dtype for engine dtype");
  }
}

DType FromNumpyDType(const py::dtype& d) {
  char kind = d.kind();
  size_t size = d.itemsize();
  if (kind == 'f') return size == 4 ? DType::kFloat32 : size == 8 ? DType::kFloat64 : size == 2 ? DType::kFloat16 : DType::kUndefined;
  if (kind == 'i') return size == 1 ? DType::kInt8 : size == 2 ? DType::kInt16 : size == 4 ? DType::kInt32 : size == 8 ? DType::kInt64 : DType::kUndefined;
  if (kind == 'u') return size == 1 ? DType::kUInt8 : DType::kUndefined;
  if (kind == 'b') return DType::kBool;
  return DType::kUndefined;
}

namespace {


/// One model input or output, like onnxruntime's NodeArg.
struct PyIOInfo {
  std::string name;
  py::tuple shape;
  py::dtype dtype;
};

PyIOInfo MakeInfo(const IOInfo& io) {
  PyIOInfo out{io.name, py::tuple(), ToNumpyDType(io.dtype)};
  if (!io.has_shape) {
    out.shape = py::none();
    return out;
  }
  py::tuple shape(io.dims.size());
  for (size_t d = 0; d < io.dims.size(); ++d) {
    if (io.dims[d] >= 0) shape[d] = py::int_(io.dims[d]);
    else if (!io.symbols[d].empty())
      shape[d] = TextToPython(io.symbols[d]);
    else shape[d] = py::none();
  }
  out.shape = shape;
  return out;
}

// memory_budget=: a positive int (bytes); larger than 64 bits means no limit.
uint64_t BudgetFromPython(const py::object& obj) {
  const bool is_int = py::isinstance<py::int_>(obj) && !py::isinstance<py::bool_>(obj);
  if (is_int && obj.cast<py::int_>() > py::int_(0)) {
    unsigned long long v = PyLong_AsUnsignedLongLong(obj.ptr());
    if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
      PyErr_Clear();
      return UINT64_MAX;
    }
    return v;
  }
  ThrowPython(StatusCode::kInput, "memory_budget must be a positive number of bytes, got " +
                                      TextFromPython(py::repr(obj)));
}

class PySession {
 public:
  PySession(py::bytes model, py::object base_dir_obj, py::object threads, bool optimize,
            const std::string& device, py::object memory_budget, const std::string& precision,
            py::object keep_fp32) {
    SessionOptions opts;
    opts.optimize = optimize;
    opts.device = device;
    opts.precision = precision;
    if (!keep_fp32.is_none()) {
      if (py::isinstance<py::str>(keep_fp32))
        ThrowPython(StatusCode::kInput, "keep_fp32 must be a list of node names or op types, not a string");
      for (const py::handle& item : keep_fp32) {
        if (!py::isinstance<py::str>(item))
          ThrowPython(StatusCode::kInput, "keep_fp32: expected node names or op types (str), got " +
                                              TextFromPython(py::repr(item)));
        opts.keep_fp32.push_back(TextFromPython(item));
      }
    }
    const std::string base_dir = PathFromPython(base_dir_obj);
    if (!memory_budget.is_none()) opts.memory_budget = BudgetFromPython(memory_budget);
    if (!threads.is_none()) {
      int t = threads.cast<int>();
      if (t < 1) ThrowPython(StatusCode::kInput, "threads must be >= 1, got " + std::to_string(t));
      opts.threads = t;
    }
    std::string_view bytes = model;
    py::gil_scoped_release release;
    session_ = Session::Load(bytes.data(), bytes.size(), base_dir, opts);
    for (size_t i = 0; i < session_->inputs().size(); ++i)
      input_index_[session_->inputs()[i].name] = static_cast<int>(i);
    for (size_t i = 0; i < session_->outputs().size(); ++i)
      output_index_[session_->outputs()[i].name] = static_cast<int>(i);
    device_ = FindDevice(device);
  }

  std::vector<PyIOInfo> inputs() const {
    std::vector<PyIOInfo> out;
    for (const auto& io : session_->inputs()) out.push_back(MakeInfo(io));
    return out;
  }
  std::vector<PyIOInfo> outputs() const {
    std::vector<PyIOInfo> out;
    for (const auto& io : session_->outputs()) out.push_back(MakeInfo(io));
    return out;
  }

  // run(feeds) -> dict; run(output_names, feeds) -> list; out= writes in place.
  // On a device session feeds (and out= buffers) may be device tensors;
  // output_device="cuda" returns DeviceArrays; stream= orders the run on the
  // caller's CUDA stream.
  py::object Run(py::object first, py::object second, py::object out, py::object output_device,
                 py::object stream) {
    bool as_dict = py::isinstance<py::dict>(first) && second.is_none();
    py::object names_obj = as_dict ? py::object(py::none()) : first;
    py::object feeds_obj = as_dict ? first : second;
    if (!py::isinstance<py::dict>(feeds_obj))
      ThrowPython(StatusCode::kInput, "feeds must be a dict mapping input names to arrays");
    py::dict feeds = feeds_obj;
    const bool on_device = session_->on_device();

    RunOptions options;
    const bool device_outputs = WantsDeviceOutputs(output_device);
    options.device_outputs = device_outputs;
    if (!stream.is_none()) {
      options.has_stream = true;
      options.stream = StreamHandle(stream);
    }
    // DLPack producers order their work before this stream (legacy default when none given).
    const uintptr_t consumer = options.has_stream ? options.stream : 1;

    const auto& ins = session_->inputs();
    std::vector<TensorView> views(ins.size());
    std::vector<py::object> keep(ins.size());
    std::vector<bool> seen(ins.size(), false);
    for (auto item : feeds) {
      std::string name = TextFromPython(item.first);
      auto it = input_index_.find(name);
      if (it == input_index_.end())
        ThrowPython(StatusCode::kInput, "unknown input '" + name + "'; the model's inputs are: " +
                                            InputNames());
      int i = it->second;
      const std::string what = "input '" + name + "'";
      DeviceView dv;
      if (on_device && DeviceFeedView(item.second, what, consumer, false, &dv)) {
        views[i] = dv.view;
        keep[i] = dv.keep;
        if (dv.has_stream) options.wait_streams.push_back(dv.stream);
      } else {
        py::array arr;
        views[i] = ArrayView(item.second, what, &arr);
        keep[i] = arr;
      }
      seen[i] = true;
    }
    for (size_t i = 0; i < ins.size(); ++i)
      if (!seen[i]) ThrowPython(StatusCode::kInput, "missing input '" + ins[i].name + "'");

    // Which outputs to return.
    std::vector<int> wanted;
    if (names_obj.is_none()) {
      for (size_t k = 0; k < session_->outputs().size(); ++k) wanted.push_back(static_cast<int>(k));
    } else {
      for (auto n : names_obj) {
        std::string name = TextFromPython(n);
        auto it = output_index_.find(name);
        if (it == output_index_.end())
          ThrowPython(StatusCode::kInput, "unknown output '" + name + "'; the model's outputs are: " +
                                              OutputNames());
        wanted.push_back(it->second);
      }
    }

    const RunOptions* opts = on_device || device_outputs || options.has_stream ? &options : nullptr;
    RunResult result;
    std::vector<py::object> out_objects;
    if (out.is_none()) {
      py::gil_scoped_release release;
      result = session_->Run(views, nullptr, nullptr, false, opts);
    } else {
      if (!py::isinstance<py::dict>(out))
        ThrowPython(StatusCode::kInput, "out must be a dict mapping output names to arrays");
      std::vector<TensorView> shapes = session_->OutputShapes(views);
      out_objects.resize(shapes.size());
      std::vector<void*> ptrs(shapes.size(), nullptr);
      py::dict out_dict = out;
      for (auto item : out_dict) {
        std::string name = TextFromPython(item.first);
        auto it = output_index_.find(name);
        if (it == output_index_.end())
          ThrowPython(StatusCode::kInput, "out: unknown output '" + name + "'");
        int k = it->second;
        const std::string what = "out['" + name + "']";
        DeviceView dv;
        TensorView v;
        if (on_device && DeviceFeedView(item.second, what, consumer, true, &dv)) {
          v = dv.view;
          out_objects[k] = dv.keep;
          if (dv.has_stream) options.wait_streams.push_back(dv.stream);
        } else {
          py::array arr;
          v = ArrayView(item.second, what, &arr, StatusCode::kInput, /*writable=*/true);
          out_objects[k] = arr;
        }
        if (v.dtype != shapes[k].dtype || v.shape != shapes[k].shape)
          ThrowPython(StatusCode::kInput, what + ": expected " +
                                              std::string(DTypeName(shapes[k].dtype)) + " " +
                                              ShapeToString(shapes[k].shape) + ", got " +
                                              DTypeName(v.dtype) + " " + ShapeToString(v.shape));
        ptrs[k] = v.data;
      }
      for (size_t k = 0; k < shapes.size(); ++k) {
        if (ptrs[k]) continue;  // given by the caller
        if (device_outputs)
          ThrowPython(StatusCode::kInput, "out: with output_device='cuda' give a device buffer for "
                                          "every output (missing '" +
                                              session_->outputs()[k].name + "')");
        py::array arr(ToNumpyDType(shapes[k].dtype),
                      std::vector<py::ssize_t>(shapes[k].shape.begin(), shapes[k].shape.end()));
        ptrs[k] = arr.mutable_data();
        out_objects[k] = arr;
      }
      options.device_outputs = false;  // the caller's buffers, wherever they are
      py::gil_scoped_release release;
      result = session_->Run(views, ptrs.data(), nullptr, false, opts);
    }

    auto get = [&](int k) -> py::object {
      if (!out_objects.empty()) return out_objects[k];
      const TensorView& v = result.outputs[k];
      if (v.memory == MemoryKind::kDevice) {
        DeviceArrayData d;
        d.owner = result.owner;
        d.data = v.data;
        d.dtype = v.dtype;
        d.shape = v.shape;
        d.ordinal = DeviceOrdinal();
        d.backend = device_;
        d.add_reader = result.add_reader;
        return WrapDevice(std::move(d));
      }
      return WrapOwned(v, result.owner);
    };
    if (as_dict) {
      py::dict d;
      for (int k : wanted) d[py::str(session_->outputs()[k].name)] = get(k);
      return d;
    }
    py::list l;
    for (int k : wanted) l.append(get(k));
    return l;
  }

  // output_device: None / "cpu" (numpy results) or this session's CUDA device.
  bool WantsDeviceOutputs(const py::object& output_device) const {
    if (output_device.is_none()) return false;
    const std::string dev = py::str(output_device);
    if (dev == "cpu") return false;
    if (dev.rfind("cuda", 0) != 0)
      ThrowPython(StatusCode::kInput, "output_device: expected 'cpu' or 'cuda', got '" + dev + "'");
    if (!session_->on_device())
      ThrowPython(StatusCode::kInput, "output_device='" + dev +
                                          "' needs a device session (device='cuda'); this session "
                                          "runs on the CPU");
    if (dev != "cuda" && dev != "cuda:" + std::to_string(DeviceOrdinal()))
      ThrowPython(StatusCode::kInput, "output_device='" + dev + "', but this session runs on " +
                                          session_->device());
    return true;
  }

  int DeviceOrdinal() const { return device_ ? device_->ordinal() : -1; }

  py::dict IoStatsDict(bool reset) {
    IoStats st = session_->io_stats();
    if (reset) session_->ResetIoStats();
    py::dict d;
    d["runs"] = st.runs;
    d["h2d_copies"] = st.h2d_copies;
    d["h2d_bytes"] = st.h2d_bytes;
    d["d2h_copies"] = st.d2h_copies;
    d["d2h_bytes"] = st.d2h_bytes;
    d["d2d_copies"] = st.d2d_copies;
    d["d2d_bytes"] = st.d2d_bytes;
    d["staging_copies"] = st.staging_copies;
    d["staging_bytes"] = st.staging_bytes;
    d["status_reads"] = st.status_reads;
    d["stream_waits"] = st.stream_waits;
    d["stream_signals"] = st.stream_signals;
    d["graph_launches"] = st.graph_launches;
    d["graph_nodes"] = st.graph_nodes;
    d["graph_updates"] = st.graph_updates;
    return d;
  }

  // An uninitialised array in memory a run moves with one DMA (page-locked on a device session).
  py::array HostBuffer(const std::vector<int64_t>& shape, py::dtype dtype) {
    DType dt = FromNumpyDType(dtype);
    if (dt == DType::kUndefined)
      ThrowPython(StatusCode::kInput, "numpy dtype " + py::str(dtype).cast<std::string>() +
                                          " is not supported");
    for (int64_t d : shape)
      if (d < 0) ThrowPython(StatusCode::kInput, "negative dimension in " + ShapeToString(shape));
    TensorView v{dt, shape, nullptr};
    std::shared_ptr<void> mem;
    {
      py::gil_scoped_release release;
      mem = session_->AllocHostBuffer(v.bytes());
    }
    v.data = mem.get();
    return WrapOwned(v, mem);
  }

  // Output (shape, dtype) for feeds of these arrays.
  py::list OutputShapes(py::dict feeds) {
    const auto& ins = session_->inputs();
    std::vector<TensorView> views(ins.size());
    std::vector<py::array> keep(ins.size());
    for (size_t i = 0; i < ins.size(); ++i) {
      if (!feeds.contains(ins[i].name)) ThrowPython(StatusCode::kInput, "missing input '" + ins[i].name + "'");
      views[i] = ArrayView(feeds[py::str(ins[i].name)], "input '" + ins[i].name + "'", &keep[i]);
    }
    py::list out;
    for (const TensorView& v : session_->OutputShapes(views))
      out.append(py::make_tuple(py::tuple(py::cast(v.shape)), ToNumpyDType(v.dtype)));
    return out;
  }

  py::dict WeightsInfo() const {
    py::dict d;
    for (const auto& w : session_->weights_info())
      d[py::str(w.name)] = py::make_tuple(py::tuple(py::cast(w.shape)), ToNumpyDType(w.dtype));
    return d;
  }

  py::dict GetWeights(py::object names) const {
    std::vector<std::string> wanted;
    if (!names.is_none())
      for (auto n : names) wanted.push_back(TextFromPython(n));
    std::map<std::string, Tensor> weights;
    {
      py::gil_scoped_release release;
      weights = session_->GetWeights(wanted);
    }
    py::dict d;
    for (auto& [name, t] : weights) {
      py::array arr(ToNumpyDType(t.dtype()), std::vector<py::ssize_t>(t.shape().begin(), t.shape().end()));
      std::memcpy(arr.mutable_data(), t.data(), t.bytes());
      d[py::str(name)] = arr;
    }
    return d;
  }

  // Reads the weights in place (numpy arrays, torch tensors on the host or this
  // session's GPU) and refits with the GIL released: no per-weight Python work.
  // Device tensors are copied after the work queued on `stream`, by default
  // torch's current stream on their device.
  py::tuple Refit(py::handle weights, bool strict, bool check_finite, py::object stream) {
    struct Scratch {
      std::vector<RefitSource> sources;
      std::vector<py::object> keep;
    };
    thread_local Scratch scratch;  // keeps its capacity: a steady refit allocates little
    struct Clear {
      Scratch& s;
      ~Clear() { s.keep.clear(); }  // with the GIL held
    } clear{scratch};
    ReadRefitSources(weights, DeviceOrdinal(), &scratch.sources, &scratch.keep);
    RefitOptions options;
    options.strict = strict;
    options.check_finite = check_finite;
    if (!stream.is_none()) {
      options.has_producer_stream = true;
      options.producer_stream = StreamHandle(stream);
    } else {
      for (const RefitSource& s : scratch.sources)
        if (s.device >= 0) {
          options.has_producer_stream = TorchCurrentStream(s.device, &options.producer_stream);
          break;
        }
    }
    Session::RefitReport report;
    {
      py::gil_scoped_release release;
      report = session_->Refit(scratch.sources, options);
    }
    return py::make_tuple(report.updated, report.ignored, report.version);
  }

  // The refit map, as parsed by kaiwu_infer.refit_map: keys {name: (shape, dtype)},
  // aliases {tied: key}, ignorable [name], entries [(weight, op, keys, perm, runs, index)].
  void SetRefitMap(py::dict keys, py::dict aliases, py::list ignorable, py::list entries) {
    RefitMapSpec spec;
    for (auto item : keys) {
      py::tuple t = py::reinterpret_borrow<py::tuple>(item.second);
      RefitMapSpec::Key k;
      k.name = TextFromPython(item.first);
      k.shape = t[0].cast<std::vector<int64_t>>();
      k.dtype = FromNumpyDType(py::dtype::from_args(t[1]));
      spec.keys.push_back(std::move(k));
    }
    for (auto item : aliases)
      spec.aliases.emplace_back(TextFromPython(item.first), TextFromPython(item.second));
    for (auto n : ignorable) spec.ignorable.push_back(TextFromPython(n));
    for (auto e : entries) {
      py::tuple t = py::reinterpret_borrow<py::tuple>(e);
      RefitMapSpec::Entry entry;
      entry.weight = TextFromPython(t[0]);
      const std::string op = TextFromPython(t[1]);
      using Op = RefitMapSpec::Entry::Op;
      entry.op = op == "transpose" ? Op::kTranspose : op == "runs" ? Op::kRuns
               : op == "gather" ? Op::kGather : Op::kCopy;
      entry.keys = t[2].cast<std::vector<std::string>>();
      entry.perm = t[3].cast<std::vector<int64_t>>();
      for (auto r : t[4]) {
        py::tuple rt = py::reinterpret_borrow<py::tuple>(r);
        entry.runs.push_back({TextFromPython(rt[0]), rt[1].cast<int64_t>(), rt[2].cast<int64_t>()});
      }
      if (!t[5].is_none()) {
        auto index = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(t[5]);
        entry.index.assign(index.data(), index.data() + index.size());
      }
      spec.entries.push_back(std::move(entry));
    }
    py::gil_scoped_release release;
    session_->SetRefitMap(spec);
  }

  py::list Profile(py::dict feeds, int runs) {
    const auto& ins = session_->inputs();
    std::vector<TensorView> views(ins.size());
    std::vector<py::array> keep(ins.size());
    for (size_t i = 0; i < ins.size(); ++i) {
      if (!feeds.contains(ins[i].name)) ThrowPython(StatusCode::kInput, "missing input '" + ins[i].name + "'");
      views[i] = ArrayView(feeds[py::str(ins[i].name)], "input '" + ins[i].name + "'", &keep[i]);
    }
    std::vector<Session::NodeProfile> prof;
    {
      py::gil_scoped_release release;
      prof = session_->Profile(views, runs);
    }
    py::list out;
    for (const auto& p : prof) {
      py::dict d;
      d["node"] = p.name;
      d["op"] = p.op_type;
      d["shape"] = py::tuple(py::cast(p.output_shape));
      d["seconds"] = p.seconds / std::max(1, runs);
      out.append(d);
    }
    return out;
  }

  std::string InputNames() const {
    std::string s;
    for (const auto& io : session_->inputs()) s += (s.empty() ? "'" : ", '") + io.name + "'";
    return s;
  }
  std::string OutputNames() const {
    std::string s;
    for (const auto& io : session_->outputs()) s += (s.empty() ? "'" : ", '") + io.name + "'";
    return s;
  }

  Session& session() { return *session_; }

 private:
  std::unique_ptr<Session> session_;
  const DeviceBackend* device_ = nullptr;  // null: the CPU
  std::map<std::string, int> input_index_, output_index_;
};

}  // namespace

Session* SessionFromPython(const py::handle& obj) {
  try {
    return &obj.cast<PySession&>().session();
  } catch (const py::cast_error&) {
    ThrowPython(StatusCode::kInput, "expected a kaiwu_infer.Session, got " +
                                        py::str(py::type::of(obj)).cast<std::string>());
  }
}

void BindSession(py::module_& m) {
  py::class_<PyIOInfo>(m, "IOInfo", "A model input or output: name, shape, numpy dtype.")
      .def_readonly("name", &PyIOInfo::name)
      .def_readonly("shape", &PyIOInfo::shape)
      .def_readonly("dtype", &PyIOInfo::dtype)
      .def("__repr__", [](const PyIOInfo& i) {
        return "IOInfo(name='" + i.name + "', shape=" + py::repr(i.shape).cast<std::string>() +
               ", dtype=" + py::str(i.dtype).cast<std::string>() + ")";
      });

  m.def("default_memory_budget", &DefaultMemoryBudget,
        "The memory budget a Session gets without memory_budget=: $KAIWU_MEMORY_BUDGET "
        "(bytes, or with a K/M/G/T suffix), else the machine's physical memory.");
  m.def("cuda_available", &CudaAvailable,
        "True when this build has the CUDA backend and a CUDA device is present.");

  py::class_<PySession>(m, "_Session")
      .def(py::init<py::bytes, py::object, py::object, bool, const std::string&, py::object,
                    const std::string&, py::object>(),
           py::arg("model"), py::arg("base_dir"), py::arg("threads"), py::arg("optimize"),
           py::arg("device") = "cpu", py::arg("memory_budget") = py::none(),
           py::arg("precision") = "fp32", py::arg("keep_fp32") = py::none())
      .def_property_readonly("device", [](PySession& s) { return s.session().device(); })
      .def_property_readonly("inputs", &PySession::inputs)
      .def_property_readonly("outputs", &PySession::outputs)
      .def_property_readonly("threads", [](PySession& s) { return s.session().num_threads(); })
      .def_property_readonly("plans", [](PySession& s) { return s.session().num_plans(); })
      .def("run", &PySession::Run, py::arg("output_names_or_feeds"), py::arg("feeds") = py::none(),
           py::kw_only(), py::arg("out") = py::none(), py::arg("output_device") = py::none(),
           py::arg("stream") = py::none())
      .def("io_stats", &PySession::IoStatsDict, py::kw_only(), py::arg("reset") = false,
           "Counts of host<->device copies and bytes, staging memcpys and caller-stream events "
           "of this session's runs (all zero on the CPU); reset=True zeroes them after reading.")
      .def("_host_buffer", &PySession::HostBuffer, py::arg("shape"), py::arg("dtype"))
      .def("_output_shapes", &PySession::OutputShapes, py::arg("feeds"))
      .def_property_readonly("weights_info", &PySession::WeightsInfo)
      .def_property_readonly("weights_version",
                             [](PySession& s) { return s.session().weights_version(); })
      .def("get_weights", &PySession::GetWeights, py::arg("names") = py::none())
      .def("_refit", &PySession::Refit, py::arg("weights"), py::arg("strict"),
           py::arg("check_finite"), py::arg("stream") = py::none())
      .def("_set_refit_map", &PySession::SetRefitMap, py::arg("keys"), py::arg("aliases"),
           py::arg("ignorable"), py::arg("entries"))
      .def_property_readonly("weight_memory",
                             [](PySession& s) {
                               WeightMemoryStats m = s.session().weight_memory();
                               py::dict d;
                               d["host_buffers"] = m.host_buffers;
                               d["host_bytes"] = m.host_bytes;
                               d["device_buffers"] = m.device_buffers;
                               d["device_bytes"] = m.device_bytes;
                               return d;
                             },
                             "Weight storage allocated so far (buffers and bytes, host and "
                             "device); unchanged by a steady-state refit.")
      .def("describe", [](PySession& s) { return s.session().Describe(); })
      .def_property_readonly("metadata", [](PySession& s) { return s.session().metadata(); })
      .def("_profile", &PySession::Profile, py::arg("feeds"), py::arg("runs"));
}

}  // namespace python
}  // namespace kaiwu
