// The public C++ API: load an ONNX model, run batches, refit weights.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kaiwu/status.h"
#include "kaiwu/tensor.h"

namespace kaiwu {

struct SessionOptions {
  int threads = 0;        ///< 0: the number of physical cores
  bool optimize = true;   ///< run the graph rewrite passes
  /// Where runs execute: "cpu", or "cuda" / "cuda:N" in a build with the CUDA
  /// backend. Feeds and results are in host memory unless a run says otherwise
  /// (RunOptions, TensorView::memory).
  std::string device = "cpu";
  /// Device sessions: "fp32" (default), "fp16" or "bf16". In half precision the
  /// nodes whose math tolerates it (convolutions, GEMMs, elementwise ops,
  /// pooling) run on float16/bfloat16 tensors with float accumulation; softmax,
  /// normalisations, reductions and recurrent cells stay float32. Weights are
  /// converted at load and at every refit (refit still takes float32); feeds
  /// and results keep the model's dtypes. The CPU backend runs float32 only.
  std::string precision = "fp32";
  /// Node names or op types kept in float32 under "fp16"/"bf16".
  std::vector<std::string> keep_fp32;
  /// The most bytes one tensor, the model's weights or one execution plan may
  /// take; sizes from the model file and plan-time shapes are checked against it
  /// before allocation (ModelError / InputError naming the place). 0: the
  /// default, $KAIWU_MEMORY_BUDGET or the machine's physical memory.
  uint64_t memory_budget = 0;
};

/// How one run on a device session moves its data (ignored on the CPU, where
/// device_outputs and stream are refused).
struct RunOptions {
  /// Results stay in device memory: RunResult::outputs are device pointers in
  /// a block that is not reused until `owner` is let go.
  bool device_outputs = false;
  /// The caller's CUDA stream (a cudaStream_t as an integer; 0 is the legacy
  /// default stream): the run starts after the work queued on it so far, and
  /// work the caller queues on it later starts after the run.
  bool has_stream = false;
  uintptr_t stream = 0;
  /// More streams the device feeds were written on (e.g. the "stream" of a
  /// __cuda_array_interface__): the run waits for their queued work too.
  std::vector<uintptr_t> wait_streams;
};

/// Counts of the data a session's runs moved between host and device (since
/// the session was made or ResetIoStats). Counts, not timings: tests use them
/// to prove that device feeds and results make no host round trip and that
/// page-locked buffers skip the staging copy.
struct IoStats {
  uint64_t runs = 0;            ///< device runs
  uint64_t h2d_copies = 0, h2d_bytes = 0;  ///< host -> device DMA (feeds)
  uint64_t d2h_copies = 0, d2h_bytes = 0;  ///< device -> host DMA (results)
  uint64_t d2d_copies = 0, d2d_bytes = 0;  ///< device feeds in, device results out
  /// memcpys between pageable memory and the page-locked staging buffers
  /// (feeds and results in pageable host memory; none for page-locked ones).
  uint64_t staging_copies = 0, staging_bytes = 0;
  uint64_t status_reads = 0;    ///< error-flag reads that end each run (mapped memory: no copy)
  uint64_t stream_waits = 0;    ///< caller streams a run waited for (events)
  uint64_t stream_signals = 0;  ///< caller streams made to wait for a run (events)
  /// Recorded launches (CUDA graphs) of runs, and the nodes they held in all:
  /// graph_nodes / graph_launches is a run's count of kernel and copy nodes.
  uint64_t graph_launches = 0, graph_nodes = 0;
  /// Recorded copy launches whose parameters a replay set to the run's own
  /// feed/result addresses (none while they equal the last run's).
  uint64_t graph_updates = 0;
};

/// A graph input or output as declared by the model.
struct IOInfo {
  std::string name;
  DType dtype = DType::kUndefined;
  bool has_shape = false;
  std::vector<int64_t> dims;          ///< -1 where not fixed
  std::vector<std::string> symbols;   ///< symbolic name per dim, "" if none
};

/// A refittable weight.
struct WeightInfo {
  std::string name;
  DType dtype;
  Shape shape;
};

/// A weight given to a refit: by one of the model's weight names (ONNX
/// initializer names) or, once a refit map is set, by a key of that map (a
/// torch state_dict key). Read in place during the refit, never kept.
struct RefitSource {
  std::string_view name;
  TensorView view;  ///< C-contiguous
  int device = -1;  ///< -1: host memory; N: memory of CUDA device N
};

struct RefitOptions {
  bool strict = true;         ///< every weight (or map key) given, no unknown name
  bool check_finite = false;  ///< refuse NaN and Inf (checked while copying)
  /// Weights in device memory: the CUDA stream whose work wrote them (a
  /// cudaStream_t as an integer; 0 is the legacy default stream), e.g. torch's
  /// current stream. The refit's copies start after the work queued on it so
  /// far (an event; the host does not wait).
  bool has_producer_stream = false;
  uintptr_t producer_stream = 0;
};

/// How a training framework's parameters become the model's weights: the
/// "kaiwu.refit_map" that kaiwu_infer.torch.export writes (parsed by Python).
struct RefitMapSpec {
  struct Key {
    std::string name;
    DType dtype = DType::kUndefined;
    Shape shape;
  };
  /// One weight, from keys: kCopy (same elements, any shape), kTranspose
  /// (keys[0].transpose(perm)), kRuns (concatenated runs [key, start, length]
  /// of flattened keys), kGather (elements `index` of the flattened keys, concatenated).
  struct Entry {
    enum class Op { kCopy, kTranspose, kRuns, kGather };
    std::string weight;
    Op op = Op::kCopy;
    std::vector<std::string> keys;  ///< kCopy, kTranspose, kGather
    std::vector<int64_t> perm;      ///< kTranspose
    struct Run {
      std::string key;
      int64_t start = 0, length = 0;
    };
    std::vector<Run> runs;        ///< kRuns
    std::vector<int64_t> index;   ///< kGather
  };
  std::vector<Key> keys;
  std::vector<std::pair<std::string, std::string>> aliases;  ///< tied key -> key read
  std::vector<std::string> ignorable;  ///< keys that feed no weight (integer buffers)
  std::vector<Entry> entries;
};

/// Memory the session's weight versions have allocated so far (never
/// decreases): once two versions exist, a refit leaves it unchanged.
struct WeightMemoryStats {
  uint64_t host_buffers = 0, host_bytes = 0;
  uint64_t device_buffers = 0, device_bytes = 0;
};

/// One immutable version of every weight (opaque). Runs pin the version they
/// start with; a refit publishes a new one.
struct WeightSet;

/// The outputs of one run: views into one engine-owned block kept alive by `owner`.
struct RunResult {
  std::vector<TensorView> outputs;
  std::shared_ptr<void> owner;
  /// Device results only: notes a CUDA stream (cudaStream_t as an integer)
  /// that reads them, so that once `owner` is let go their memory is not
  /// rewritten before that stream has done the work queued on it by then.
  /// Valid while `owner` lives.
  std::function<void(uintptr_t)> add_reader;
};

class Session {
 public:
  /// Loads from serialized ONNX bytes. `base_dir` resolves external data ("" refuses it).
  static std::unique_ptr<Session> Load(const void* bytes, size_t size, const std::string& base_dir,
                                       const SessionOptions& options = {});
  static std::unique_ptr<Session> LoadFile(const std::string& path,
                                           const SessionOptions& options = {});
  ~Session();

  const std::vector<IOInfo>& inputs() const;
  const std::vector<IOInfo>& outputs() const;
  int num_threads() const;
  /// Compiled plans cached: one per distinct set of input shapes seen (at most 64).
  int num_plans() const;
  /// "cpu", or the device's name, e.g. "cuda:0 (NVIDIA H100 80GB HBM3)".
  std::string device() const;
  bool on_device() const;
  /// The model's metadata_props (e.g. "kaiwu.refit_map" written by kaiwu_infer.torch.export).
  const std::map<std::string, std::string>& metadata() const;

  /// Checks feeds (one per input, in order) against the model and returns the
  /// output dtypes and shapes they produce. Throws kInput naming the input.
  std::vector<TensorView> OutputShapes(const std::vector<TensorView>& feeds) const;

  /// Runs on feeds (one per input, in order). Thread-safe. With `user_outputs`
  /// (one pointer per output, sized per OutputShapes) writes there instead.
  /// `weights` selects a weight version (default: the current one).
  /// `single_thread` runs every kernel on the calling thread, for callers that
  /// run several batches side by side themselves (the inference server).
  /// On a device session feeds may be in device memory (TensorView::memory;
  /// wrong-device pointers throw kInput naming the input), and `options` say
  /// where results go and which caller stream orders the run.
  RunResult Run(const std::vector<TensorView>& feeds, void* const* user_outputs = nullptr,
                const WeightSet* weights = nullptr, bool single_thread = false,
                const RunOptions* options = nullptr) const;

  /// Host <-> device traffic of this session's runs (all zero on the CPU).
  IoStats io_stats() const;
  void ResetIoStats();
  /// Host memory for feeds and results: page-locked on a device session (a run
  /// moves it with one DMA, no staging copy), 64-byte aligned on the CPU.
  std::shared_ptr<void> AllocHostBuffer(size_t bytes) const;

  // ---- refit
  std::vector<WeightInfo> weights_info() const;
  uint64_t weights_version() const;
  /// Copies of the current values of the named weights (all when empty).
  std::map<std::string, Tensor> GetWeights(const std::vector<std::string>& names = {}) const;
  struct RefitReport {
    std::vector<std::string> updated;
    std::vector<std::string> ignored;
    uint64_t version = 0;  ///< the version the refit published
  };
  /// Replaces weights atomically. strict: every weight given and no unknown
  /// name. check_finite: refuse NaN/Inf. Throws kRefit and changes nothing on failure.
  RefitReport Refit(const std::map<std::string, TensorView>& weights, bool strict,
                    bool check_finite);
  /// The same for weights named by model weight names or, with a refit map, by
  /// its keys (the names decide: all keys, or more keys than weight names).
  /// The new values are written into storage no run holds (no allocation once
  /// two versions exist), derived weights downstream are recomputed, and the
  /// version is published with one pointer swap; runs in flight keep the old one.
  RefitReport Refit(const std::vector<RefitSource>& weights, const RefitOptions& options);

  /// Installs the map from framework parameter names to weights. Throws kRefit
  /// when it names weights the model does not have or shapes that disagree.
  void SetRefitMap(const RefitMapSpec& map);
  bool has_refit_map() const;
  WeightMemoryStats weight_memory() const;

  /// Builds a weight version from `base` (default: the current one) with the
  /// given weights replaced and derived weights recomputed, without publishing
  /// it: a server keeps several versions that share one graph and its plans.
  /// Validation as in Refit; `report` (optional) receives what was used.
  std::shared_ptr<const WeightSet> BuildWeights(const std::map<std::string, TensorView>& weights,
                                                bool strict, bool check_finite,
                                                RefitReport* report = nullptr,
                                                const WeightSet* base = nullptr) const;
  std::shared_ptr<const WeightSet> BuildWeights(const std::vector<RefitSource>& weights,
                                                const RefitOptions& options,
                                                RefitReport* report = nullptr,
                                                const WeightSet* base = nullptr) const;
  /// The version runs use by default.
  std::shared_ptr<const WeightSet> CurrentWeights() const;

  /// Per-node timing over `runs` runs on `feeds`, in execution order.
  struct NodeProfile {
    std::string name, op_type;
    Shape output_shape;
    double seconds = 0;  ///< total over all runs
  };
  std::vector<NodeProfile> Profile(const std::vector<TensorView>& feeds, int runs) const;

  /// Text summary of the graph (op counts before/after optimization, rules fired).
  std::string Describe() const;

 private:
  struct Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  RunResult RunOnHost(const std::vector<TensorView>& feeds, void* const* user_outputs,
                      const WeightSet* weights, bool single_thread, const RunOptions* options) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kaiwu
