#include "plan/execution_plan.h"

#include <chrono>
#include <cstring>

#include "core/memory_budget.h"
#include "plan/memory_planner.h"
#include "plan/node_plan.h"

namespace kaiwu {

struct ExecutionPlan::RunContext {
  void* arena = nullptr;                   // host arena (CPU plans)
  std::shared_ptr<void> device_arena;      // device plans
  std::unique_ptr<DeviceBackend::Stream> stream;
  std::vector<const void*> ptr;  // by value id
  std::vector<const void*> in_flat;
  std::vector<void*> out_flat;
  std::vector<const void*> graph_key;  // device plans: the weight addresses of this run
  std::vector<char> queued_out;         // device plans: output copies queued into the recording
  ~RunContext() { AlignedFree(arena); }
};

ExecutionPlan::~ExecutionPlan() = default;

namespace {

// Names the input dimension a plan's size most likely comes from: the largest
// dimension the model leaves free (its batch axis, a sequence length).
std::string FreeDimensionCause(const Graph& g, const std::vector<Shape>& input_shapes) {
  std::string best;
  int64_t best_value = -1;
  for (size_t i = 0; i < g.inputs.size() && i < input_shapes.size(); ++i) {
    const Value& v = g.values[g.inputs[i]];
    for (size_t d = 0; d < input_shapes[i].size(); ++d) {
      const bool fixed = v.has_shape && d < v.dims.size() && v.dims[d].value >= 0;
      if (fixed || input_shapes[i][d] <= best_value) continue;
      best_value = input_shapes[i][d];
      const std::string symbol = v.has_shape && d < v.dims.size() ? v.dims[d].symbol : "";
      best = "input '" + v.name + "' dimension " + std::to_string(d) +
             (symbol.empty() ? "" : " ('" + symbol + "')") + " is " + std::to_string(best_value);
    }
  }
  std::string shapes;
  for (size_t i = 0; i < g.inputs.size() && i < input_shapes.size(); ++i)
    shapes += (i ? ", " : "") + g.values[g.inputs[i]].name + "=" + ShapeToString(input_shapes[i]);
  return "; input shapes (" + shapes + ")" +
         (best.empty() ? "" : "; the largest dimension the model leaves free: " + best);
}

}  // namespace

ExecutionPlan::ExecutionPlan(const PlanInputs& in, const std::vector<Shape>& input_shapes)
    : device_(in.device) {
  if (device_) device_->MakeCurrent();
  const Graph& g = *in.graph;
  const size_t nv = g.values.size();
  std::vector<TensorInfo> info(nv);
  slot_.assign(nv, Slot::kUnused);
  arena_offset_.assign(nv, 0);
  consts_.resize(nv);
  std::vector<int> root(nv, -1);
  std::vector<size_t> alias_start(nv, 0);  // bytes into the root's buffer
  std::vector<std::vector<bool>> step_unused;  // per step: the inputs its kernel leaves unread
  bool any_unused = false;
  // Every output and the whole arena are checked against the memory budget
  // before they are allocated (folded constants now, the arena at the first run).
  const OutputBudget budget{CurrentMemoryBudget(), StatusCode::kInput,
                            FreeDimensionCause(g, input_shapes)};
  uint64_t const_bytes = 0;

  for (size_t i = 0; i < g.inputs.size(); ++i) {
    int v = g.inputs[i];
    const void* known = in.input_values ? (*in.input_values)[i] : nullptr;
    info[v] = TensorInfo{true, g.values[v].dtype, input_shapes[i], known};
    slot_[v] = Slot::kInput;
    input_values_.push_back(v);
  }
  for (size_t v = 0; v < nv; ++v) {
    if (!(*in.is_static)[v] || !in.weights->values[v]) continue;
    const Tensor& t = *in.weights->values[v];
    // Structural constants are visible to Prepare; weights are not (they change on refit).
    info[v] = TensorInfo{true, t.dtype(), t.shape(),
                         (*in.depends_on_weight)[v] ? nullptr : t.data()};
    slot_[v] = Slot::kStatic;
  }
  std::vector<bool> is_output(nv, false);
  for (int v : g.outputs) is_output[v] = true;

  // Prepare each runtime node; fold what is known at plan time.
  std::vector<BufferRequest> requests;
  std::vector<int> request_of(nv, -1);
  if (device_) {
    // Feeds are copied into device buffers at the start of each run.
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      int v = g.inputs[i];
      input_bytes_.push_back(static_cast<size_t>(NumElements(input_shapes[i])) *
                             DTypeSize(info[v].dtype));
      request_of[v] = static_cast<int>(requests.size());
      requests.push_back(BufferRequest{input_bytes_.back(), 0, 0});
    }
  }
  for (int n : *in.runtime_nodes) {
    const Node& node = g.nodes[n];
    PrepareContext ctx(node);
    ctx.num_threads = in.num_threads;
    for (int v : node.inputs) {
      TensorInfo ti;
      if (v >= 0) {
        ti = info[v];
        if (!ti.present) Fail(StatusCode::kInternal, node.Describe(), " reads '", g.values[v].name,
                              "' before it is computed");
      }
      ctx.inputs.push_back(ti);
    }
    InferNode(ctx, &budget);  // once per node and shape signature, for every backend

    if (FoldsAtPlanTime(ctx)) {
      // Fold now: the outputs become plan constants.
      std::vector<void*> fold_out;
      for (size_t o = 0; o < node.outputs.size(); ++o) {
        int v = node.outputs[o];
        if (v < 0) {
          fold_out.push_back(nullptr);
          continue;
        }
        const_bytes = AddBytes(const_bytes, static_cast<uint64_t>(ctx.outputs[o].size()) *
                                                DTypeSize(ctx.outputs[o].dtype));
        if (const_bytes > budget.bytes)
          Fail(StatusCode::kInput, "the values this plan computes from shapes and constants (",
               FormatBytes(const_bytes), " so far, at ", node.Describe(), ") exceed ",
               BudgetText(budget.bytes), budget.cause);
        consts_[v] = std::make_shared<Tensor>(ctx.outputs[o].dtype, ctx.outputs[o].shape);
        fold_out.push_back(consts_[v]->data());
      }
      EvaluateOnHost(ctx, fold_out.data());
      for (int v : node.outputs) {
        if (v < 0) continue;
        info[v] = TensorInfo{true, consts_[v]->dtype(), consts_[v]->shape(), consts_[v]->data()};
        slot_[v] = Slot::kConst;
      }
      continue;
    }
    std::unique_ptr<Kernel> kernel =
        device_ ? PrepareKernel(device_->kernels(), device_->backend(), ctx)
                : PrepareKernel(CpuKernels(), "cpu", ctx);
    device_needs_ |= ctx.device_needs;

    int step_index = static_cast<int>(steps_.size());
    Step step{kernel.get(), n, static_cast<int>(step_inputs_.size()), node.num_inputs(),
              static_cast<int>(step_outputs_.size()), static_cast<int>(node.outputs.size()), 0};
    for (int v : node.inputs) {
      step_inputs_.push_back(v);
      if (v >= 0) {
        int r = slot_[v] == Slot::kAlias ? root[v] : v;
        if (request_of[r] >= 0) requests[request_of[r]].last_use = step_index;
        if (slot_[v] == Slot::kStatic) static_values_used_.push_back(v);
      }
    }
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      int v = node.outputs[o];
      step_outputs_.push_back(v);
      if (v < 0) continue;
      info[v] = ctx.outputs[o];
      info[v].data = nullptr;
      int a = ctx.alias[o];
      if (is_output[v] && !device_) {
        slot_[v] = Slot::kOutput;
      } else if (a >= 0 && a < node.num_inputs() && node.inputs[a] >= 0 &&
                 info[node.inputs[a]].dtype == ctx.outputs[o].dtype) {
        int src = node.inputs[a];
        slot_[v] = Slot::kAlias;
        root[v] = slot_[src] == Slot::kAlias ? root[src] : src;
        const int64_t elems = o < ctx.alias_offset.size() ? ctx.alias_offset[o] : 0;
        alias_start[v] = (slot_[src] == Slot::kAlias ? alias_start[src] : 0) +
                         static_cast<size_t>(elems) * DTypeSize(ctx.outputs[o].dtype);
        alias_order_.push_back(v);
      } else {
        slot_[v] = Slot::kArena;
        request_of[v] = static_cast<int>(requests.size());
        size_t bytes = static_cast<size_t>(ctx.outputs[o].size()) * DTypeSize(ctx.outputs[o].dtype);
        requests.push_back(BufferRequest{bytes, step_index, step_index});
      }
    }
    if (ctx.scratch_bytes > 0) {
      step.scratch_offset = requests.size();  // request index until placed
      requests.push_back(BufferRequest{ctx.scratch_bytes, step_index, step_index});
    } else {
      step.scratch_offset = SIZE_MAX;
    }
    steps_.push_back(step);
    step_shapes_.push_back(ctx.outputs.empty() ? Shape{} : ctx.outputs[0].shape);
    step_names_.push_back(node.Describe());
    kernels_.push_back(std::move(kernel));
    step_unused.push_back(ctx.unused_inputs);
    any_unused = any_unused || !ctx.unused_inputs.empty();
  }
  // Buffer lifetimes are in step indices of the loop above, dropped steps included.
  const int end = static_cast<int>(steps_.size());
  if (any_unused) DropUnreadSteps(g, step_unused);
  if (device_) {
    // Device outputs live in the arena until the copy out after the last step.
    for (int v : g.outputs) {
      int r = slot_[v] == Slot::kAlias ? root[v] : v;
      if (request_of[r] >= 0) requests[request_of[r]].last_use = end;
    }
  }

  MemoryPlan mem = PlanMemory(requests);
  arena_bytes_ = mem.total_bytes;
  uint64_t output_bytes = 0;
  for (int v : g.outputs)
    if (info[v].present)
      output_bytes =
          AddBytes(output_bytes, static_cast<uint64_t>(info[v].size()) * DTypeSize(info[v].dtype));
  const uint64_t plan_bytes = AddBytes(AddBytes(arena_bytes_, output_bytes), const_bytes);
  if (plan_bytes > budget.bytes) {
    // Name the largest intermediate: the buffer that most needs a smaller input.
    size_t largest = 0;
    int largest_value = -1;
    for (size_t v = 0; v < nv; ++v)
      if (request_of[v] >= 0 && requests[request_of[v]].bytes > largest) {
        largest = requests[request_of[v]].bytes;
        largest_value = static_cast<int>(v);
      }
    std::string what;
    if (largest_value >= 0) {
      const Value& lv = g.values[largest_value];
      what = " (largest intermediate: '" + lv.name + "'" +
             (lv.producer >= 0 ? " of " + g.nodes[lv.producer].Describe() : std::string()) +
             ", shape " + ShapeToString(info[largest_value].shape) + ", " + FormatBytes(largest) +
             ")";
    }
    Fail(StatusCode::kInput, "the execution plan needs ", FormatBytes(plan_bytes), " (arena ",
         FormatBytes(arena_bytes_), what, ", outputs ", FormatBytes(output_bytes), ", constants ",
         FormatBytes(const_bytes), "), more than ", BudgetText(budget.bytes), budget.cause);
  }
  for (size_t v = 0; v < nv; ++v)
    if (slot_[v] == Slot::kArena || (device_ && slot_[v] == Slot::kInput))
      arena_offset_[v] = mem.offsets[request_of[v]];
  for (Step& s : steps_)
    if (s.scratch_offset != SIZE_MAX) s.scratch_offset = mem.offsets[s.scratch_offset];
  for (int v : alias_order_) {
    alias_root_.push_back(root[v]);
    alias_bytes_.push_back(alias_start[v]);
  }

  // Outputs: computed in place when a step writes them, else copied at the end.
  std::vector<bool> written(nv, false);
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    int v = g.outputs[k];
    TensorInfo ti = info[v];
    if (!ti.present) Fail(StatusCode::kInternal, "output '", g.values[v].name, "' never computed");
    ti.data = nullptr;
    outputs_.push_back(ti);
    output_offsets_.push_back(output_block_bytes_);
    output_block_bytes_ += (static_cast<size_t>(ti.size()) * DTypeSize(ti.dtype) + 63) / 64 * 64;
    if (slot_[v] == Slot::kOutput && !written[v] && !device_) {
      written[v] = true;
      output_values_.push_back(v);
    } else {
      output_values_.push_back(-1);
      output_copies_.emplace_back(static_cast<int>(k), v);
    }
  }
  if (device_) {
    device_consts_.resize(nv);
    for (size_t v = 0; v < nv; ++v)
      if (slot_[v] == Slot::kConst) device_consts_[v] = device_->Upload(consts_[v]->data(), consts_[v]->bytes());
  }
}

std::unique_ptr<ExecutionPlan::RunContext> ExecutionPlan::NewContext() const {
  auto ctx = std::make_unique<RunContext>();
  char* base;
  if (device_) {
    ctx->device_arena = device_->Alloc(arena_bytes_);
    base = static_cast<char*>(ctx->device_arena.get());
    size_t in_bytes = 0, out_bytes = 0;
    for (size_t b : input_bytes_) in_bytes += DeviceBackend::StagingBytes(b);
    for (const TensorInfo& o : outputs_)
      out_bytes += DeviceBackend::StagingBytes(static_cast<size_t>(o.size()) * DTypeSize(o.dtype));
    ctx->stream = device_->NewStream(in_bytes, out_bytes, device_needs_);
  } else {
    ctx->arena = AlignedAlloc(arena_bytes_);
    base = static_cast<char*>(ctx->arena);
  }
  ctx->ptr.assign(slot_.size(), nullptr);
  for (size_t v = 0; v < slot_.size(); ++v) {
    if (slot_[v] == Slot::kArena || (device_ && slot_[v] == Slot::kInput))
      ctx->ptr[v] = base + arena_offset_[v];
    if (slot_[v] == Slot::kConst)
      ctx->ptr[v] = device_ ? device_consts_[v].get() : consts_[v]->data();
  }
  ctx->in_flat.assign(step_inputs_.size(), nullptr);
  ctx->out_flat.assign(step_outputs_.size(), nullptr);
  return ctx;
}

void ExecutionPlan::DropUnreadSteps(const Graph& g, const std::vector<std::vector<bool>>& unused) {
  // Backwards from the graph outputs: a step runs when a later running step
  // reads one of its outputs (an input the reader leaves unread does not count).
  std::vector<bool> read(g.values.size(), false);
  for (int v : g.outputs) read[v] = true;
  std::vector<bool> runs(steps_.size(), false);
  for (size_t i = steps_.size(); i-- > 0;) {
    const Step& s = steps_[i];
    for (int j = 0; j < s.out_count && !runs[i]; ++j) {
      const int v = step_outputs_[s.out_begin + j];
      runs[i] = v >= 0 && read[v];
    }
    if (!runs[i]) continue;
    for (int j = 0; j < s.in_count; ++j) {
      const int v = step_inputs_[s.in_begin + j];
      const bool unread = j < static_cast<int>(unused[i].size()) && unused[i][j];
      if (v >= 0 && !unread) read[v] = true;
    }
  }
  size_t kept = 0;
  for (size_t i = 0; i < steps_.size(); ++i) {
    if (!runs[i]) continue;
    if (kept != i) {
      steps_[kept] = steps_[i];
      step_shapes_[kept] = std::move(step_shapes_[i]);
      step_names_[kept] = std::move(step_names_[i]);
      kernels_[kept] = std::move(kernels_[i]);
    }
    ++kept;
  }
  steps_.resize(kept);
  step_shapes_.resize(kept);
  step_names_.resize(kept);
  kernels_.resize(kept);
}

KernelIO ExecutionPlan::BindStep(RunContext& ctx, const Step& s, char* arena, ThreadPool* pool,
                                 const void* device) const {
  for (int j = 0; j < s.in_count; ++j) {
    int v = step_inputs_[s.in_begin + j];
    ctx.in_flat[s.in_begin + j] = v >= 0 ? ctx.ptr[v] : nullptr;
  }
  for (int j = 0; j < s.out_count; ++j) {
    int v = step_outputs_[s.out_begin + j];
    ctx.out_flat[s.out_begin + j] = v >= 0 ? const_cast<void*>(ctx.ptr[v]) : nullptr;
  }
  return KernelIO{ctx.in_flat.data() + s.in_begin, ctx.out_flat.data() + s.out_begin,
                  s.scratch_offset == SIZE_MAX ? nullptr : arena + s.scratch_offset, pool, device};
}

void ExecutionPlan::Run(const void* const* feeds, void* const* outputs, const WeightSet& weights,
                        ThreadPool* pool, double* step_seconds, const DeviceRunIO* io) const {
  std::unique_ptr<RunContext> ctx;
  {
    std::lock_guard<std::mutex> lock(contexts_mu_);
    if (!free_contexts_.empty()) {
      ctx = std::move(free_contexts_.back());
      free_contexts_.pop_back();
    }
  }
  if (!ctx) ctx = NewContext();
  struct Release {
    const ExecutionPlan* plan;
    std::unique_ptr<RunContext>* ctx;
    ~Release() {
      std::lock_guard<std::mutex> lock(plan->contexts_mu_);
      plan->free_contexts_.push_back(std::move(*ctx));
    }
  } release{this, &ctx};
  if (device_) {
    RunOnDevice(*ctx, feeds, outputs, weights, step_seconds, io);
    return;
  }

  std::vector<const void*>& ptr = ctx->ptr;
  for (size_t i = 0; i < input_values_.size(); ++i) ptr[input_values_[i]] = feeds[i];
  for (int v : static_values_used_) ptr[v] = weights.pointers[v];
  for (size_t k = 0; k < output_values_.size(); ++k)
    if (output_values_[k] >= 0) ptr[output_values_[k]] = outputs[k];
  for (size_t i = 0; i < alias_order_.size(); ++i)
    ptr[alias_order_[i]] = static_cast<const char*>(ptr[alias_root_[i]]) + alias_bytes_[i];

  char* arena = static_cast<char*>(ctx->arena);
  for (const Step& s : steps_) {
    const KernelIO io = BindStep(*ctx, s, arena, pool, nullptr);
    if (step_seconds) {
      auto t0 = std::chrono::steady_clock::now();
      s.kernel->Run(io);
      step_seconds[&s - steps_.data()] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } else {
      s.kernel->Run(io);
    }
  }
  for (const auto& [k, v] : output_copies_) {
    const void* src = slot_[v] == Slot::kStatic ? weights.pointers[v] : ptr[v];
    std::memcpy(outputs[k], src, static_cast<size_t>(outputs_[k].size()) * DTypeSize(outputs_[k].dtype));
  }
}

void ExecutionPlan::RunOnDevice(RunContext& ctx, const void* const* feeds, void* const* outputs,
                                const WeightSet& weights, double* step_seconds,
                                const DeviceRunIO* io) const {
  device_->MakeCurrent();
  DeviceBackend::Stream& stream = *ctx.stream;
  auto describe = [this](int step) {
    return step >= 0 && step < static_cast<int>(step_names_.size()) ? step_names_[step]
                                                                      : std::string("a step");
  };
  if (weights.device_pointers.size() != slot_.size())
    Fail(StatusCode::kInternal, "the weights have no copy on ", device_->name());
  std::vector<const void*>& ptr = ctx.ptr;
  for (int v : static_values_used_) ptr[v] = weights.device_pointers[v];
  for (size_t i = 0; i < alias_order_.size(); ++i)
    ptr[alias_order_[i]] = static_cast<const char*>(ptr[alias_root_[i]]) + alias_bytes_[i];
  char* arena = static_cast<char*>(ctx.device_arena.get());
  auto launch_steps = [&] {
    for (size_t si = 0; si < steps_.size(); ++si) {
      const Step& s = steps_[si];
      stream.SetStep(static_cast<int>(si));
      const KernelIO io = BindStep(ctx, s, arena, nullptr, stream.kernel_context());
      if (step_seconds) {
        auto t0 = std::chrono::steady_clock::now();
        s.kernel->Run(io);
        stream.Finish(describe);
        step_seconds[si] +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      } else {
        s.kernel->Run(io);
      }
    }
  };
  const MemKind* feed_kinds = io ? io->feeds : nullptr;
  const MemKind* out_kinds = io ? io->outputs : nullptr;
  try {
    stream.Begin(io);
    // Feeds into the plan's input buffers: staged, one DMA from page-locked
    // memory, or device to device. The recorded steps read only these buffers.
    // Device feeds and device and host results are queued to be part of the
    // recording (not when timing steps: each step's Finish ends the run's copies).
    const bool queue = step_seconds == nullptr;
    for (size_t i = 0; i < input_values_.size(); ++i) {
      const MemKind kind = feed_kinds ? feed_kinds[i] : MemKind::kHost;
      void* dst = const_cast<void*>(ptr[input_values_[i]]);
      if (!queue || kind != MemKind::kDevice || !stream.QueueDeviceCopy(false, dst, feeds[i], input_bytes_[i]))
        stream.CopyIn(dst, feeds[i], input_bytes_[i], kind, queue);
    }
    auto out_src = [&](int v) { return slot_[v] == Slot::kStatic ? weights.device_pointers[v] : ptr[v]; };
    std::vector<char>& queued_out = ctx.queued_out;
    queued_out.assign(output_copies_.size(), 0);
    for (size_t c = 0; c < output_copies_.size(); ++c) {
      const auto& [k, v] = output_copies_[c];
      const size_t bytes = static_cast<size_t>(outputs_[k].size()) * DTypeSize(outputs_[k].dtype);
      const MemKind kind = out_kinds ? out_kinds[k] : MemKind::kHost;
      if (!queue) continue;
      if (kind == MemKind::kDevice)
        queued_out[c] = stream.QueueDeviceCopy(true, outputs[k], out_src(v), bytes);
      else if (kind == MemKind::kHost)
        queued_out[c] = stream.QueueHostResult(outputs[k], out_src(v), bytes);
    }
    // The steps' launches depend only on this context's buffers and the
    // weights' addresses: replay them as one recorded graph when possible.
    bool ran = false;
    if (!step_seconds) {
      ctx.graph_key.clear();
      for (int v : static_values_used_) ctx.graph_key.push_back(ptr[v]);
      ran = stream.Replay(ctx.graph_key);
      if (!ran && stream.BeginRecord()) {
        // A launch that fails while recording ends recording on this stream;
        // the steps then run directly below (and a real error shows there).
        bool recorded = true;
        try {
          launch_steps();
        } catch (const Error&) {
          recorded = false;
        }
        ran = stream.EndRecord(ctx.graph_key, recorded);
      }
    }
    if (!ran) {
      stream.FlushQueuedCopies(false);
      launch_steps();
      stream.FlushQueuedCopies(true);
    }
    for (size_t c = 0; c < output_copies_.size(); ++c) {
      if (queued_out[c]) continue;
      const auto& [k, v] = output_copies_[c];
      stream.CopyOut(outputs[k], out_src(v),
                     static_cast<size_t>(outputs_[k].size()) * DTypeSize(outputs_[k].dtype),
                     out_kinds ? out_kinds[k] : MemKind::kHost);
    }
  } catch (...) {
    // Drain the stream so the context is clean for the next run, then report the first error.
    try {
      stream.Finish(describe);
    } catch (...) {
    }
    throw;
  }
  stream.Finish(describe);
}

}  // namespace kaiwu
