#include "kaiwu/session.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <set>
#include <sstream>

#include "core/memory_budget.h"
#include "core/thread_pool.h"
#include "onnx/loader.h"
#include "passes/fuse_attention.h"
#include "passes/fuse_mlp.h"
#include "passes/layout_nhwc.h"
#include "passes/mixed_precision.h"
#include "passes/pass_manager.h"
#include "passes/rules.h"
#include "plan/execution_plan.h"
#include "runtime/device_io.h"
#include "runtime/weight_builder.h"
#include "runtime/weight_set.h"

namespace kaiwu {

namespace {

std::map<std::string, int> CountOps(const Graph& g) {
  std::map<std::string, int> counts;
  for (const Node& n : g.nodes) counts[n.op_type]++;
  return counts;
}

IOInfo MakeIOInfo(const Value& v) {
  IOInfo io;
  io.name = v.name;
  io.dtype = v.dtype;
  io.has_shape = v.has_shape;
  for (const Dim& d : v.dims) {
    io.dims.push_back(d.value);
    io.symbols.push_back(d.symbol);
  }
  return io;
}

// Pool of output blocks for one plan: a run's outputs stay alive as long as
// the caller holds them, then the block is reused. On a device session the
// blocks are page-locked, so results come back with one DMA and no staging copy.
struct BlockPool {
  size_t bytes;
  const DeviceBackend* pinned_on;  // null: 64-byte aligned pageable memory
  std::mutex mu;
  std::vector<std::shared_ptr<void>> free;
  BlockPool(size_t b, const DeviceBackend* device) : bytes(b), pinned_on(device) {}
};

std::shared_ptr<void> AcquireBlock(const std::shared_ptr<BlockPool>& pool) {
  std::shared_ptr<void> block;
  {
    std::lock_guard<std::mutex> lock(pool->mu);
    if (!pool->free.empty()) {
      block = std::move(pool->free.back());
      pool->free.pop_back();
    }
  }
  if (!block)
    block = pool->pinned_on ? pool->pinned_on->AllocPinned(pool->bytes)
                            : std::shared_ptr<void>(AlignedAlloc(pool->bytes), AlignedFree);
  void* p = block.get();
  return std::shared_ptr<void>(p, [pool, block = std::move(block)](void*) mutable {
    std::lock_guard<std::mutex> lock(pool->mu);
    if (pool->free.size() < 16) pool->free.push_back(std::move(block));
    else block.reset();
  });
}

// Gives `next` device copies of its static values, sharing those of `base`
// where the value itself is shared (a refit uploads only what changed).
void UploadWeights(const DeviceBackend& device, WeightSet* next, const WeightSet* base) {
  const size_t n = next->values.size();
  next->device_values.assign(n, nullptr);
  next->device_pointers.assign(n, nullptr);
  for (size_t v = 0; v < n; ++v) {
    const auto& t = next->values[v];
    if (!t) continue;
    if (base && v < base->device_values.size() && base->values[v] == t && base->device_values[v])
      next->device_values[v] = base->device_values[v];
    else
      next->device_values[v] = device.Upload(t->data(), t->bytes());
    next->device_pointers[v] = next->device_values[v].get();
  }
}

}  // namespace

struct Session::Impl {
  SessionOptions options;
  const DeviceBackend* device = nullptr;  // null: the CPU
  Graph graph;
  std::map<std::string, int> ops_before, ops_after;
  PassStats pass_stats;
  std::string precision = "fp32";
  MixedPrecisionReport precision_report;  // empty in fp32
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<StaticProgram> statics;
  std::unique_ptr<WeightBuilder> builder;
  std::vector<bool> is_static, depends_on_weight;
  std::vector<int> runtime_nodes;
  std::vector<IOInfo> inputs, outputs;
  std::vector<int> weight_ids;  // refittable values, in graph order
  // Graph inputs whose values (not just shapes) the plan needs: they feed a
  // shape operand. Their values join the plan-cache key.
  std::vector<bool> value_keyed_input;

  mutable std::mutex weights_mu;
  std::shared_ptr<const WeightSet> weights;
  std::mutex refit_mu;

  struct CachedPlan {
    std::shared_ptr<const ExecutionPlan> plan;
    std::shared_ptr<BlockPool> blocks;
    std::shared_ptr<DeviceBackend::ResultPool> device_blocks;  // device results
  };
  mutable IoCounters io;
  static constexpr size_t kMaxPlans = 64;
  mutable std::mutex plans_mu;
  mutable std::list<std::pair<std::vector<int64_t>, CachedPlan>> plans;  // most recent first

  std::shared_ptr<const WeightSet> Snapshot() const {
    std::lock_guard<std::mutex> lock(weights_mu);
    return weights;
  }

  void CheckFeeds(const std::vector<TensorView>& feeds) const;
  CachedPlan GetPlan(const std::vector<TensorView>& feeds) const;
};

void Session::Impl::CheckFeeds(const std::vector<TensorView>& feeds) const {
  if (feeds.size() != inputs.size())
    Fail(StatusCode::kInput, "expected ", inputs.size(), " inputs, got ", feeds.size());
  std::map<std::string, std::pair<int64_t, std::string>> symbols;
  for (size_t i = 0; i < feeds.size(); ++i) {
    const IOInfo& io = inputs[i];
    const TensorView& f = feeds[i];
    if (f.dtype != io.dtype)
      Fail(StatusCode::kInput, "input '", io.name, "': expected dtype ", DTypeName(io.dtype),
           ", got ", DTypeName(f.dtype));
    if (!io.has_shape) continue;
    if (f.shape.size() != io.dims.size())
      Fail(StatusCode::kInput, "input '", io.name, "': expected rank ", io.dims.size(),
           ", got shape ", ShapeToString(f.shape));
    for (size_t d = 0; d < io.dims.size(); ++d) {
      if (io.dims[d] >= 0 && f.shape[d] != io.dims[d])
        Fail(StatusCode::kInput, "input '", io.name, "': dimension ", d, " must be ", io.dims[d],
             ", got shape ", ShapeToString(f.shape));
      if (io.dims[d] < 0 && !io.symbols[d].empty()) {
        auto it = symbols.find(io.symbols[d]);
        if (it == symbols.end()) {
          symbols[io.symbols[d]] = {f.shape[d], io.name};
        } else if (it->second.first != f.shape[d]) {
          Fail(StatusCode::kInput, "input '", io.name, "': dimension ", d, " ('", io.symbols[d],
               "') is ", f.shape[d], ", but input '", it->second.second, "' gives '",
               io.symbols[d], "' = ", it->second.first);
        }
      }
    }
  }
}

Session::Impl::CachedPlan Session::Impl::GetPlan(const std::vector<TensorView>& feeds) const {
  std::vector<int64_t> key;
  for (size_t i = 0; i < feeds.size(); ++i) {
    const TensorView& f = feeds[i];
    key.push_back(static_cast<int64_t>(f.shape.size()));
    key.insert(key.end(), f.shape.begin(), f.shape.end());
    if (value_keyed_input[i]) {
      if (f.dtype != inputs[i].dtype) CheckFeeds(feeds);  // raises the dtype error
      // The raw bytes, 8 at a time, so any dtype keys exactly.
      const size_t bytes = f.bytes();
      key.push_back(static_cast<int64_t>(bytes));
      for (size_t off = 0; off < bytes; off += 8) {
        int64_t chunk = 0;
        std::memcpy(&chunk, static_cast<const char*>(f.data) + off, std::min<size_t>(8, bytes - off));
        key.push_back(chunk);
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(plans_mu);
    for (auto it = plans.begin(); it != plans.end(); ++it) {
      if (it->first == key) {
        if (it != plans.begin()) plans.splice(plans.begin(), plans, it);
        return plans.front().second;
      }
    }
  }
  CheckFeeds(feeds);
  MemoryBudgetScope budget(options.memory_budget);
  std::vector<Shape> shapes;
  for (const TensorView& f : feeds) shapes.push_back(f.shape);
  auto ws = Snapshot();
  std::vector<const void*> input_values(feeds.size(), nullptr);
  for (size_t i = 0; i < feeds.size(); ++i)
    if (value_keyed_input[i]) input_values[i] = feeds[i].data;
  PlanInputs pin{&graph, &runtime_nodes, &is_static, &depends_on_weight, ws.get(),
                 pool->num_threads(), &input_values, device};
  std::shared_ptr<const ExecutionPlan> plan;
  try {
    plan = std::make_shared<ExecutionPlan>(pin, shapes);
  } catch (const Error& e) {
    if (e.code() != StatusCode::kModel) throw;
    std::ostringstream os;
    os << "the input shapes (";
    for (size_t i = 0; i < feeds.size(); ++i)
      os << (i ? ", " : "") << inputs[i].name << "=" << ShapeToString(feeds[i].shape);
    os << ") do not fit the model: " << e.what();
    throw Error(StatusCode::kInput, os.str());
  }
  CachedPlan cached{plan, std::make_shared<BlockPool>(plan->output_block_bytes(), device),
                    device ? device->NewResultPool(plan->output_block_bytes()) : nullptr};
  std::lock_guard<std::mutex> lock(plans_mu);
  // A concurrent run of the same shapes may have built and cached it meanwhile:
  // keep one plan per key.
  for (auto it = plans.begin(); it != plans.end(); ++it)
    if (it->first == key) return it->second;
  plans.emplace_front(key, cached);
  if (plans.size() > kMaxPlans) plans.pop_back();
  return cached;
}

namespace {

// precision= of SessionOptions: the mixed-precision pass for "fp16" / "bf16"
// on a device session.
void ApplyPrecision(Graph& g, const DeviceBackend* device, const SessionOptions& options,
                    const std::set<std::string>& names_before, std::string* precision,
                    MixedPrecisionReport* report) {
  const std::string& p = options.precision;
  DType half = DType::kUndefined;
  if (p == "fp16" || p == "float16") half = DType::kFloat16;
  else if (p == "bf16" || p == "bfloat16") half = DType::kBFloat16;
  else if (p != "fp32" && p != "float32")
    Fail(StatusCode::kInput, "precision must be 'fp32', 'fp16' or 'bf16', got '", p, "'");
  for (const std::string& name : options.keep_fp32) {
    bool found = names_before.count(name) != 0;
    for (const Node& n : g.nodes) found = found || n.name == name || n.op_type == name;
    if (!found)
      Fail(StatusCode::kInput, "keep_fp32: '", name, "' is neither a node name nor an op type of the model");
  }
  if (half == DType::kUndefined) return;
  if (!device)
    Fail(StatusCode::kUnsupported, "precision='", p,
         "' needs a device session (device='cuda'); the CPU backend runs float32");
  *precision = half == DType::kFloat16 ? "fp16" : "bf16";
  const KernelRegistry& kernels = device->kernels();
  MixedPrecisionOptions mp;
  mp.half = half;
  mp.keep_fp32 = options.keep_fp32;
  mp.has_kernel = [&kernels](OpId op, DType t) { return kernels.Find(op, t) != nullptr; };
  *report = ApplyMixedPrecision(&g, mp);
}

}  // namespace

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

std::unique_ptr<Session> Session::Load(const void* bytes, size_t size, const std::string& base_dir,
                                       const SessionOptions& options) {
  MemoryBudgetScope budget(options.memory_budget);
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->device = FindDevice(options.device);
  impl->graph = LoadOnnxModel(bytes, size, base_dir);
  Graph& g = impl->graph;
  impl->ops_before = CountOps(g);
  for (int v : g.inputs) impl->inputs.push_back(MakeIOInfo(g.values[v]));
  for (int v : g.outputs) impl->outputs.push_back(MakeIOInfo(g.values[v]));
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].kind == ValueKind::kWeight) impl->weight_ids.push_back(static_cast<int>(v));
  std::set<std::string> names_before;  // node names and op types as imported (keep_fp32)
  for (const Node& n : g.nodes) {
    names_before.insert(n.name);
    names_before.insert(n.op_type);
  }
  if (options.optimize) Optimize(&g, &impl->pass_stats);
  if (options.optimize && !impl->device) OptimizeForCpu(&g, &impl->pass_stats);
  const char* batch_first_env = std::getenv("KAIWU_RNN_BATCH_FIRST");
  if (options.optimize && impl->device && !(batch_first_env && std::string(batch_first_env) == "0"))
    if (int n = FoldRnnBatchFirst(&g)) impl->pass_stats.fired["fold_rnn_batch_first"] += n;
  const char* trans_b_env = std::getenv("KAIWU_MATMUL_TRANS_B");
  if (options.optimize && impl->device && !(trans_b_env && std::string(trans_b_env) == "0"))
    if (int n = FoldTransposeIntoMatMul(&g)) impl->pass_stats.fired["fold_transpose_into_matmul"] += n;
  g.RemoveDeadNodes();
  ApplyPrecision(g, impl->device, options, names_before, &impl->precision,
                 &impl->precision_report);
  if (options.optimize && impl->device && impl->precision != "fp32" &&
      impl->device->ChannelsLastHalfConvs()) {
    const KernelRegistry& kernels = impl->device->kernels();
    if (int n = ConvertToNhwc(&g, [&kernels](OpId op, DType t) { return kernels.Find(op, t) != nullptr; })) {
      impl->pass_stats.fired["layout_nhwc"] += n;
      // Residual Adds and input ReLUs into the convs (the direct conv kernel
      // applies both in its own passes over memory; KAIWU_CONV_FUSE=0 keeps them).
      const char* fuse_env = std::getenv("KAIWU_CONV_FUSE");
      if (!(fuse_env && std::string(fuse_env) == "0")) {
        if (int a = FuseNhwcConvAdd(&g)) impl->pass_stats.fired["fuse_nhwc_conv_add"] += a;
        if (int r = FuseReluIntoNhwcConv(&g)) impl->pass_stats.fired["fuse_relu_into_nhwc_conv"] += r;
      }
    }
  }
  // Integer convs channels-last: on a device when its backend asks for it, on
  // the CPU always (rows of the product are pixels, gathered from runs of
  // KW * C bytes: backends/cpu/quant_fused.cc); KAIWU_INT8_NHWC=0 keeps NCHW.
  const char* int8_nhwc_env = std::getenv("KAIWU_INT8_NHWC");
  const bool int8_nhwc = impl->device ? impl->device->ChannelsLastInt8Convs()
                                      : !(int8_nhwc_env && std::string(int8_nhwc_env) == "0");
  // CPU: kernel rows packed for the kernel that reads them in place
  // (KAIWU_INT8_INPLACE=0 keeps the row gather).
  const char* inplace_env = std::getenv("KAIWU_INT8_INPLACE");
  const int row_align =
      impl->device || (inplace_env && std::string(inplace_env) == "0") ? 0 : CpuInt8ConvRowAlign();
  if (options.optimize && int8_nhwc)
    if (int n = ConvertQLinearConvsToNhwc(&g, /*cpu_session=*/!impl->device, row_align))
      impl->pass_stats.fired["layout_nhwc_int8"] += n;
  // CPU: the float sections between integer nodes on bytes where that is exact
  // (max pools of a DequantizeLinear, Q(DQ(a) + DQ(b))); KAIWU_INT8_BYTE_OPS=0 keeps them float.
  const char* byte_ops_env = std::getenv("KAIWU_INT8_BYTE_OPS");
  if (options.optimize && !impl->device && !(byte_ops_env && std::string(byte_ops_env) == "0")) {
    if (int n = HoistMaxPoolAboveDequantize(&g)) {
      impl->pass_stats.fired["hoist_pool_above_dequantize"] += n;
      if (int m = FuseQdqLookup(&g)) impl->pass_stats.fired["fuse_qdq_lookup"] += m;
    }
    if (int n = FuseQdqAdd(&g)) impl->pass_stats.fired["fuse_qdq_add"] += n;
  }
  // Small dense networks as one FusedMlp launch (KAIWU_FUSED_MLP=0 keeps the Gemms;
  // bench/notes/cuda.md has the A/B).
  const char* fused_mlp_env = std::getenv("KAIWU_FUSED_MLP");
  if (options.optimize && impl->device && impl->precision != "fp32" &&
      !(fused_mlp_env && std::string(fused_mlp_env) == "0")) {
    const KernelRegistry& kernels = impl->device->kernels();
    const char* rank3_env = std::getenv("KAIWU_FUSED_MLP_RANK3");
    const bool wide = !(rank3_env && std::string(rank3_env) == "0");
    if (int n = FuseMlp(&g, [&kernels](OpId op, DType t) { return kernels.Find(op, t) != nullptr; }, wide))
      impl->pass_stats.fired["fuse_mlp"] += n;
  }
  // Attention (MatMul [x scale] [+ mask] -> Softmax -> MatMul) as one kernel: on the CPU by
  // default (KAIWU_FUSED_ATTENTION=0 keeps the ops); on the device by default in 16-bit
  // nodes (the tensor-core kernel), in float32 nodes only with KAIWU_FUSED_ATTENTION=1 (its
  // warp-a-row kernel ran slower than cuBLAS and the ops' kernels from batch 256 on:
  // bench/notes/cuda.md).
  const char* attention_env = std::getenv("KAIWU_FUSED_ATTENTION");
  const std::string attention = attention_env ? attention_env : "";
  if (options.optimize && attention != "0") {
    const KernelRegistry& kernels = impl->device ? impl->device->kernels() : CpuKernels();
    const bool any_dtype = !impl->device || attention == "1";
    // Q, K and V read through views of the tensors their layout ops start from,
    // those ops' steps dropped (bench/notes/cuda.md): on the CPU (unit_transformer b32
    // 5-17% faster in 6 of 6 paired runs) and on a device (H100 fp16: 78 -> 68 kernels,
    // 8-27% more rows/s at b1-b1024); KAIWU_ATTENTION_VIEWS=0 keeps the ops.
    const char* views_env = std::getenv("KAIWU_ATTENTION_VIEWS");
    const bool views = !(views_env && std::string(views_env) == "0");
    if (int n = FuseAttention(&g, [&kernels, any_dtype](OpId op, DType t) {
          return (any_dtype || IsHalf(t)) && kernels.Find(op, t) != nullptr;
        }, views))
      impl->pass_stats.fired["fuse_attention"] += n;
  }
  impl->ops_after = CountOps(g);
  int threads = options.threads > 0 ? options.threads : ThreadPool::PhysicalCores();
  impl->pool = std::make_unique<ThreadPool>(threads);

  impl->statics = std::make_unique<StaticProgram>(g, &impl->is_static, &impl->depends_on_weight);
  std::vector<bool> in_static(g.nodes.size(), false);
  for (int n : impl->statics->nodes()) in_static[n] = true;
  for (size_t n = 0; n < g.nodes.size(); ++n)
    if (!in_static[n]) impl->runtime_nodes.push_back(static_cast<int>(n));

  // Walk back from shape operands to find the graph inputs whose values shape the plan.
  std::vector<bool> needs_value(g.values.size(), false);
  for (auto it = impl->runtime_nodes.rbegin(); it != impl->runtime_nodes.rend(); ++it) {
    const Node& n = g.nodes[*it];
    bool out_needed = false;
    for (int o : n.outputs) out_needed = out_needed || (o >= 0 && needs_value[o]);
    const bool reads_shapes_only = n.op_type == "Shape" || n.op_type == "Size";
    for (int i = 0; i < n.num_inputs(); ++i)
      if (n.inputs[i] >= 0 && (IsShapeOperand(n.op_type, i) || (out_needed && !reads_shapes_only)))
        needs_value[n.inputs[i]] = true;
  }
  for (int v : g.inputs) {
    const Value& val = g.values[v];
    // Small tensors only: shape operands are short vectors and scalars.
    bool small = val.has_shape && val.dims.size() <= 1;
    impl->value_keyed_input.push_back(needs_value[v] && small);
  }

  auto ws = std::make_shared<WeightSet>();
  ws->values.resize(g.values.size());
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].data) ws->values[v] = g.values[v].data;
  impl->statics->Load(g, ws.get(), impl->pool.get());
  if (impl->device) {
    // Every op that runs per step needs a device kernel; ops the op layer
    // evaluates (Shape, Size, ConstantOfShape, Range) are computed at plan time on the host.
    std::set<std::string> missing;
    for (int n : impl->runtime_nodes) {
      const Node& node = g.nodes[n];
      const OpId op = NodeOp(node);
      if (GetOpDef(op).eval) continue;
      if (!impl->device->kernels().Has(op))
        missing.insert((node.domain.empty() ? "" : node.domain + ".") + node.op_type);
    }
    if (!missing.empty()) {
      std::string list;
      for (const auto& op : missing) list += (list.empty() ? "" : ", ") + op;
      Fail(StatusCode::kUnsupported, "device '", impl->device->name(), "' has no kernel for: ", list,
           " (run this model with device='cpu')");
    }
    UploadWeights(*impl->device, ws.get(), nullptr);
  }
  impl->builder = std::make_unique<WeightBuilder>(g, *impl->statics, impl->weight_ids,
                                                  impl->pool.get(), impl->device);
  impl->weights = ws;
  return std::unique_ptr<Session>(new Session(std::move(impl)));
}

std::unique_ptr<Session> Session::LoadFile(const std::string& path, const SessionOptions& options) {
  std::string bytes = ReadFileBytes(path);
  std::string dir = ".";
  auto slash = path.find_last_of('/');
  if (slash != std::string::npos) dir = path.substr(0, slash);
  if (dir.empty()) dir = "/";
  return Load(bytes.data(), bytes.size(), dir, options);
}

const std::vector<IOInfo>& Session::inputs() const { return impl_->inputs; }
const std::vector<IOInfo>& Session::outputs() const { return impl_->outputs; }
int Session::num_threads() const { return impl_->pool->num_threads(); }
int Session::num_plans() const {
  std::lock_guard<std::mutex> lock(impl_->plans_mu);
  return static_cast<int>(impl_->plans.size());
}
std::string Session::device() const { return impl_->device ? impl_->device->name() : "cpu"; }
bool Session::on_device() const { return impl_->device != nullptr; }
const std::map<std::string, std::string>& Session::metadata() const { return impl_->graph.metadata; }

std::vector<TensorView> Session::OutputShapes(const std::vector<TensorView>& feeds) const {
  auto cached = impl_->GetPlan(feeds);
  std::vector<TensorView> out;
  for (const TensorInfo& o : cached.plan->outputs()) out.push_back(TensorView{o.dtype, o.shape, nullptr});
  return out;
}

RunResult Session::Run(const std::vector<TensorView>& feeds, void* const* user_outputs,
                       const WeightSet* weights, bool single_thread,
                       const RunOptions* options) const {
  const DeviceBackend* device = impl_->device;
  if (!device) return RunOnHost(feeds, user_outputs, weights, single_thread, options);
  device->MakeCurrent();
  // Inputs whose values shape the plan are read on the host: device copies of
  // them come down first (a few bytes: shape operands).
  std::vector<Tensor> value_copies;
  std::vector<TensorView> host_keyed;
  const std::vector<TensorView>* run_feeds = &feeds;
  for (size_t i = 0; i < feeds.size() && i < impl_->value_keyed_input.size(); ++i) {
    if (!impl_->value_keyed_input[i] || feeds[i].memory != MemoryKind::kDevice) continue;
    if (host_keyed.empty()) {
      host_keyed = feeds;
      value_copies.reserve(feeds.size());
    }
    value_copies.emplace_back(feeds[i].dtype, feeds[i].shape);
    MemKind kind = MemKind::kHost;
    ClassifyFeeds(*device, {impl_->inputs[i]}, {feeds[i]}, &kind);
    device->Download(value_copies.back().data(), feeds[i].data, feeds[i].bytes());
    host_keyed[i] = value_copies.back().view();
    run_feeds = &host_keyed;
  }
  auto cached = impl_->GetPlan(*run_feeds);
  const ExecutionPlan& plan = *cached.plan;
  for (size_t i = 0; i < feeds.size(); ++i)
    if (feeds[i].dtype != impl_->inputs[i].dtype)
      Fail(StatusCode::kInput, "input '", impl_->inputs[i].name, "': expected dtype ",
           DTypeName(impl_->inputs[i].dtype), ", got ", DTypeName(feeds[i].dtype));
  const size_t n_in = run_feeds->size(), n_out = plan.outputs().size();
  std::vector<const void*> fp(n_in);
  for (size_t i = 0; i < n_in; ++i) fp[i] = (*run_feeds)[i].data;
  std::vector<MemKind> feed_kinds(n_in), out_kinds(n_out);
  ClassifyFeeds(*device, impl_->inputs, *run_feeds, feed_kinds.data());

  RunResult result;
  result.outputs.resize(n_out);
  std::vector<void*> out_ptrs(n_out);
  std::shared_ptr<ResultBlock> device_block;
  const bool device_outputs = options && options->device_outputs;
  if (user_outputs) {
    for (size_t k = 0; k < n_out; ++k) {
      if (!user_outputs[k] && plan.outputs()[k].size() > 0)
        Fail(StatusCode::kInput, "no buffer given for output '", impl_->outputs[k].name, "'");
      out_ptrs[k] = user_outputs[k];
    }
    ClassifyOutputs(*device, impl_->outputs, user_outputs, n_out, out_kinds.data());
  } else if (device_outputs) {
    // Results stay on the device, in a block the caller holds until it lets go.
    device_block = cached.device_blocks->Acquire();
    char* base = static_cast<char*>(device_block->data());
    for (size_t k = 0; k < n_out; ++k) {
      out_ptrs[k] = base + plan.output_offsets()[k];
      out_kinds[k] = MemKind::kDevice;
    }
    ResultBlock* raw = device_block.get();
    // The caller's stream reads the results: the block is not rewritten, once
    // let go, before that stream has done so.
    if (options->has_stream) raw->AddReader(options->stream);
    result.owner = std::shared_ptr<void>(device_block, raw->data());
    result.add_reader = [raw](uintptr_t stream) { raw->AddReader(stream); };
  } else {
    result.owner = AcquireBlock(cached.blocks);  // page-locked: one DMA, no staging
    for (size_t k = 0; k < n_out; ++k) {
      out_ptrs[k] = static_cast<char*>(result.owner.get()) + plan.output_offsets()[k];
      out_kinds[k] = MemKind::kPinned;
    }
  }
  for (size_t k = 0; k < n_out; ++k)
    result.outputs[k] = TensorView{plan.outputs()[k].dtype, plan.outputs()[k].shape, out_ptrs[k],
                                   out_kinds[k] == MemKind::kDevice ? MemoryKind::kDevice
                                                                    : MemoryKind::kHost};
  DeviceRunIO io;
  io.feeds = feed_kinds.data();
  io.outputs = out_kinds.data();
  io.result_block = device_block.get();
  io.counters = &impl_->io;
  SetCallerStreams(options, &io);
  std::shared_ptr<const WeightSet> pinned;
  if (!weights) {
    pinned = impl_->Snapshot();
    weights = pinned.get();
  }
  plan.Run(fp.data(), out_ptrs.data(), *weights, impl_->pool.get(), nullptr, &io);
  return result;
}

RunResult Session::RunOnHost(const std::vector<TensorView>& feeds, void* const* user_outputs,
                             const WeightSet* weights, bool single_thread,
                             const RunOptions* options) const {
  CheckHostOnly(impl_->inputs, feeds, options);
  auto cached = impl_->GetPlan(feeds);
  const ExecutionPlan& plan = *cached.plan;
  for (size_t i = 0; i < feeds.size(); ++i)
    if (feeds[i].dtype != impl_->inputs[i].dtype)
      Fail(StatusCode::kInput, "input '", impl_->inputs[i].name, "': expected dtype ",
           DTypeName(impl_->inputs[i].dtype), ", got ", DTypeName(feeds[i].dtype));
  const size_t n_in = feeds.size(), n_out = plan.outputs().size();
  const void* feed_ptrs[64];
  std::vector<const void*> feed_heap;
  const void** fp = feed_ptrs;
  if (n_in > 64) {
    feed_heap.resize(n_in);
    fp = feed_heap.data();
  }
  for (size_t i = 0; i < n_in; ++i) fp[i] = feeds[i].data;

  RunResult result;
  result.outputs.resize(n_out);
  std::vector<void*> out_ptrs(n_out);
  if (user_outputs) {
    for (size_t k = 0; k < n_out; ++k) {
      if (!user_outputs[k] && plan.outputs()[k].size() > 0)
        Fail(StatusCode::kInput, "no buffer given for output '", impl_->outputs[k].name, "'");
      out_ptrs[k] = user_outputs[k];
    }
  } else {
    result.owner = AcquireBlock(cached.blocks);
    for (size_t k = 0; k < n_out; ++k)
      out_ptrs[k] = static_cast<char*>(result.owner.get()) + plan.output_offsets()[k];
  }
  for (size_t k = 0; k < n_out; ++k)
    result.outputs[k] = TensorView{plan.outputs()[k].dtype, plan.outputs()[k].shape, out_ptrs[k]};
  std::shared_ptr<const WeightSet> pinned;
  if (!weights) {
    pinned = impl_->Snapshot();
    weights = pinned.get();
  }
  // A one-thread pool has no workers: ParallelFor runs inline on the caller.
  static ThreadPool inline_pool(1);
  plan.Run(fp, out_ptrs.data(), *weights, single_thread ? &inline_pool : impl_->pool.get());
  return result;
}

std::vector<Session::NodeProfile> Session::Profile(const std::vector<TensorView>& feeds,
                                                   int runs) const {
  auto cached = impl_->GetPlan(feeds);
  const ExecutionPlan& plan = *cached.plan;
  std::vector<const void*> fp;
  for (const TensorView& f : feeds) fp.push_back(f.data);
  std::vector<double> seconds(plan.num_steps(), 0.0);
  auto weights = impl_->Snapshot();
  for (int r = 0; r < std::max(1, runs); ++r) {
    std::shared_ptr<void> block = AcquireBlock(cached.blocks);
    std::vector<void*> outs;
    for (size_t k = 0; k < plan.outputs().size(); ++k)
      outs.push_back(static_cast<char*>(block.get()) + plan.output_offsets()[k]);
    plan.Run(fp.data(), outs.data(), *weights, impl_->pool.get(), seconds.data());
  }
  std::vector<NodeProfile> out;
  for (size_t i = 0; i < plan.num_steps(); ++i) {
    const Node& n = impl_->graph.nodes[plan.step_node(i)];
    out.push_back(NodeProfile{n.name, n.op_type, plan.step_output_shape(i), seconds[i]});
  }
  return out;
}

std::vector<WeightInfo> Session::weights_info() const {
  std::vector<WeightInfo> out;
  auto ws = impl_->Snapshot();
  for (int v : impl_->weight_ids) {
    const Tensor& t = *ws->values[v];
    out.push_back(WeightInfo{impl_->graph.values[v].name, t.dtype(), t.shape()});
  }
  return out;
}

uint64_t Session::weights_version() const { return impl_->Snapshot()->version; }

std::map<std::string, Tensor> Session::GetWeights(const std::vector<std::string>& names) const {
  auto ws = impl_->Snapshot();
  std::map<std::string, int> by_name;
  for (int v : impl_->weight_ids) by_name[impl_->graph.values[v].name] = v;
  std::vector<std::string> wanted = names;
  if (wanted.empty())
    for (const auto& kv : by_name) wanted.push_back(kv.first);
  std::vector<int> ids;
  for (const std::string& n : wanted) {
    auto it = by_name.find(n);
    if (it == by_name.end()) Fail(StatusCode::kRefit, "unknown weight '", n, "'");
    ids.push_back(it->second);
  }
  impl_->builder->EnsureHost(*ws, ids);
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < wanted.size(); ++i) {
    const std::string& n = wanted[i];
    const Tensor& src = *ws->values[ids[i]];
    Tensor copy(src.dtype(), src.shape());
    std::memcpy(copy.data(), src.data(), src.bytes());
    out.emplace(n, std::move(copy));
  }
  return out;
}

std::shared_ptr<const WeightSet> Session::CurrentWeights() const { return impl_->Snapshot(); }

namespace {

std::vector<RefitSource> Sources(const std::map<std::string, TensorView>& weights) {
  std::vector<RefitSource> out;
  out.reserve(weights.size());
  for (const auto& [name, view] : weights) out.push_back(RefitSource{name, view, -1});
  return out;
}

}  // namespace

std::shared_ptr<const WeightSet> Session::BuildWeights(
    const std::map<std::string, TensorView>& weights, bool strict, bool check_finite,
    RefitReport* report, const WeightSet* base) const {
  return BuildWeights(Sources(weights), RefitOptions{strict, check_finite}, report, base);
}

std::shared_ptr<const WeightSet> Session::BuildWeights(const std::vector<RefitSource>& weights,
                                                       const RefitOptions& options,
                                                       RefitReport* report,
                                                       const WeightSet* base) const {
  std::shared_ptr<const WeightSet> holder;
  if (!base) {
    holder = impl_->Snapshot();
    base = holder.get();
  }
  return impl_->builder->Build(weights, options, report, *base);
}

Session::RefitReport Session::Refit(const std::map<std::string, TensorView>& weights, bool strict,
                                    bool check_finite) {
  return Refit(Sources(weights), RefitOptions{strict, check_finite});
}

Session::RefitReport Session::Refit(const std::vector<RefitSource>& weights,
                                    const RefitOptions& options) {
  // Refits are serialized so that versions rise by one and none is lost.
  std::lock_guard<std::mutex> refit_lock(impl_->refit_mu);
  RefitReport report;
  auto current = impl_->Snapshot();
  std::shared_ptr<const WeightSet> next = impl_->builder->Build(weights, options, &report, *current);
  {
    std::lock_guard<std::mutex> lock(impl_->weights_mu);
    impl_->weights.swap(next);
  }
  current.reset();
  next.reset();  // the old version, freed here unless a run holds it (outside weights_mu)
  return report;
}

void Session::SetRefitMap(const RefitMapSpec& map) { impl_->builder->SetMap(map); }
bool Session::has_refit_map() const { return impl_->builder->has_map(); }
WeightMemoryStats Session::weight_memory() const { return impl_->builder->memory(); }

IoStats Session::io_stats() const {
  const IoCounters& c = impl_->io;
  auto v = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  IoStats s;
  s.runs = v(c.runs);
  s.h2d_copies = v(c.h2d_copies);
  s.h2d_bytes = v(c.h2d_bytes);
  s.d2h_copies = v(c.d2h_copies);
  s.d2h_bytes = v(c.d2h_bytes);
  s.d2d_copies = v(c.d2d_copies);
  s.d2d_bytes = v(c.d2d_bytes);
  s.staging_copies = v(c.staging_copies);
  s.staging_bytes = v(c.staging_bytes);
  s.status_reads = v(c.status_reads);
  s.stream_waits = v(c.stream_waits);
  s.stream_signals = v(c.stream_signals);
  s.graph_launches = v(c.graph_launches);
  s.graph_nodes = v(c.graph_nodes);
  s.graph_updates = v(c.graph_updates);
  return s;
}

void Session::ResetIoStats() {
  IoCounters& c = impl_->io;
  for (std::atomic<uint64_t>* a :
       {&c.runs, &c.h2d_copies, &c.h2d_bytes, &c.d2h_copies, &c.d2h_bytes, &c.d2d_copies,
        &c.d2d_bytes, &c.staging_copies, &c.staging_bytes, &c.status_reads, &c.stream_waits,
        &c.stream_signals, &c.graph_launches, &c.graph_nodes, &c.graph_updates})
    a->store(0, std::memory_order_relaxed);
}

std::shared_ptr<void> Session::AllocHostBuffer(size_t bytes) const {
  if (impl_->device) return impl_->device->AllocPinned(bytes);
  return std::shared_ptr<void>(AlignedAlloc(bytes ? bytes : 64), AlignedFree);
}

std::string Session::Describe() const {
  std::ostringstream os;
  auto total = [](const std::map<std::string, int>& m) {
    int t = 0;
    for (const auto& kv : m) t += kv.second;
    return t;
  };
  os << "graph '" << impl_->graph.name << "' (opset " << impl_->graph.opset << ")\n";
  os << "nodes before optimization: " << total(impl_->ops_before) << "\n";
  for (const auto& [op, n] : impl_->ops_before) os << "  " << op << ": " << n << "\n";
  os << "nodes after optimization: " << total(impl_->ops_after) << " ("
     << impl_->statics->nodes().size() << " computed from weights at load and refit, "
     << impl_->runtime_nodes.size() << " per run)\n";
  for (const auto& [op, n] : impl_->ops_after) os << "  " << op << ": " << n << "\n";
  os << "rewrite rules fired:";
  if (impl_->pass_stats.fired.empty()) os << " none";
  os << "\n";
  for (const auto& [rule, n] : impl_->pass_stats.fired) os << "  " << rule << ": " << n << "\n";
  os << "threads: " << impl_->pool->num_threads() << "\n";
  os << "device: " << device() << "\n";
  os << "precision: " << impl_->precision;
  const MixedPrecisionReport& mp = impl_->precision_report;
  if (!mp.nodes.empty()) {
    os << " (" << mp.half_nodes() << " of " << mp.nodes.size() << " float nodes in "
       << impl_->precision << ", " << mp.casts << " casts added)\n";
    for (const auto& e : mp.nodes)
      os << "  " << e.op_type << " '" << e.node << "': "
         << (e.half ? impl_->precision : "fp32 (" + e.reason + ")") << "\n";
  } else {
    os << "\n";
  }
  return os.str();
}

}  // namespace kaiwu
