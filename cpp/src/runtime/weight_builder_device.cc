// The device half of WeightBuilder: a refit of a GPU session uploads host
// arrays through staging in chunks (weight_builder_staging.cc), copies CUDA
// tensors device to device (one launch for all, the staged weights' last
// pass included), and recomputes derived weights on the device where their
// kernels exist, all on a stream of its own; the version is published once
// that stream is done. Copy steps of derived weights (LSTM/GRU gates
// repacked, transposes) whose sources the refit gives whole, or leaves
// unchanged, read those sources in the weights' own launch; the others run
// after what they read.
#include <algorithm>
#include <cstdint>

#include "plan/node_plan.h"
#include "runtime/weight_builder.h"
#include "runtime/weight_pool.h"

namespace kaiwu {

namespace {

// The device copy of one block into `dst_base` from `src` (elements of es bytes).
DeviceCopyJob CopyJob(const CopyBlock& b, char* dst_base, const void* src, int es) {
  DeviceCopyJob j;
  j.dst = dst_base + b.dst_offset * es;
  j.src = src;
  j.src_offset = b.src_offset;
  j.rows = b.rows;
  j.cols = b.cols;
  j.row_stride = b.row_stride;
  j.col_stride = b.col_stride;
  j.elem_size = es;
  return j;
}

}  // namespace

void WeightBuilder::PrepareDevice(const WeightSet& ws) {
  if (device_prepared_) return;
  const auto& steps = statics_.steps();
  device_kernels_.clear();
  device_kernels_.resize(steps.size());
  uint32_t needs = 0;
  size_t scratch = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const StaticProgram::Step& s = steps[i];
    bool refit = false;
    for (int out : s.outputs) refit = refit || statics_.from_weight(out);
    if (s.copy || !refit) continue;  // never recomputed
    const PrepareContext* host = statics_.prepared(s.node);
    PrepareContext ctx(host->node);
    ctx.num_threads = 1;
    for (size_t k = 0; k < host->inputs.size(); ++k) {
      TensorInfo t = host->inputs[k];
      const int in = host->node.inputs[k];
      // Structural constants are visible to Prepare; weights are not.
      t.data = in >= 0 && !statics_.from_weight(in) ? ws.pointers[in] : nullptr;
      ctx.inputs.push_back(t);
    }
    try {
      InferOp(ctx);
      device_kernels_[i] = PrepareKernel(device_->kernels(), device_->name(), ctx);
      needs |= ctx.device_needs;
      scratch = std::max(scratch, ctx.scratch_bytes);
    } catch (const Error&) {
      device_kernels_[i] = nullptr;  // computed on the host, then uploaded
    }
  }
  if (scratch) device_scratch_ = device_->Alloc(scratch);
  stream_ = device_->NewStream(0, 0, needs);
  device_prepared_ = true;
}

// Copy steps [begin, end) as one launch: their sources are computed already.
void WeightBuilder::QueueCopySteps(const WeightSet& next, size_t begin, size_t end) {
  const auto& steps = statics_.steps();
  jobs_.clear();
  for (size_t i = begin; i < end; ++i) {
    if (!dirty_[i]) continue;
    const StaticProgram::Step& s = steps[i];
    const int out = s.outputs[0];
    const int es = static_cast<int>(DTypeSize(statics_.dtype(out)));
    char* dst = static_cast<char*>(next.buffers[out]->device.get());
    for (const CopyBlock& b : s.blocks)
      jobs_.push_back(CopyJob(b, dst, next.device_pointers[s.sources[b.src]], es));
    next.buffers[out]->host_current = false;
    trace_.Add(RefitTrace::kCopySteps, 1);
  }
  if (jobs_.empty()) return;
  trace_.Add(RefitTrace::kLaunches, 1);
  trace_.Add(RefitTrace::kJobs, static_cast<int64_t>(jobs_.size()));
  stream_->CopyElements(jobs_, !paths_.jobs_by_value);
}

const void* WeightBuilder::EarlySource(const WeightSet& next, int v) const {
  const int wi = write_of_[v];
  if (wi < 0) return changed_[v] ? nullptr : next.device_pointers[v];  // unchanged: the base's buffer
  if (stage_at_[wi] != SIZE_MAX) return stage_device_ + stage_at_[wi];  // staged whole
  const Write& w = writes_[wi];
  if (!w.on_device || w.num_src != 1 || w.blocks->size() != 1) return nullptr;
  const CopyBlock& b = (*w.blocks)[0];
  const bool whole = b.src == 0 && b.src_offset == 0 && b.dst_offset == 0 && b.col_stride == 1 &&
                     (b.rows == 1 || b.row_stride == b.cols) &&
                     b.size() == NumElements(statics_.shape(v));
  return whole ? srcs_[w.first_src] : nullptr;
}

void WeightBuilder::QueueEarlyCopySteps(const WeightSet& next, const std::vector<RefitSource>& given,
                                        bool keys) {
  const auto& steps = statics_.steps();
  for (size_t i = 0; i < steps.size(); ++i) {
    if (!dirty_[i] || !steps[i].copy) continue;
    const StaticProgram::Step& s = steps[i];
    const int out = s.outputs[0];
    const int es = static_cast<int>(DTypeSize(statics_.dtype(out)));
    char* dst = static_cast<char*>(next.buffers[out]->device.get());
    step_srcs_.clear();
    for (int v : s.sources) {
      step_srcs_.push_back(EarlySource(next, v));
      if (!step_srcs_.back()) break;
    }
    const std::vector<CopyBlock>* blocks = &s.blocks;
    if (step_srcs_.size() != s.sources.size() || (!step_srcs_.empty() && !step_srcs_.back())) {
      // Keys through the refit map (gates repacked into the weight): the step
      // composed with the map's blocks reads the given tensors, when all of
      // them are in device memory.
      blocks = keys ? fusion_->map_blocks(static_cast<int>(i)) : nullptr;
      if (!blocks) continue;
      const std::vector<int>& map_keys = fusion_->map_keys(static_cast<int>(i));
      step_srcs_.clear();
      for (int k : map_keys) {
        const int g = key_src_[k];
        if (g < 0 || given[g].device < 0) break;
        step_srcs_.push_back(given[g].view.data);
      }
      if (step_srcs_.size() != map_keys.size()) continue;
    }
    for (const CopyBlock& b : *blocks) jobs_.push_back(CopyJob(b, dst, step_srcs_[b.src], es));
    next.buffers[out]->host_current = false;
    dirty_[i] = 0;  // done in the weights' launch
    trace_.Add(RefitTrace::kEarlySteps, 1);
  }
}

void WeightBuilder::BuildOnDevice(WeightSet* next, const std::vector<RefitSource>& given, bool keys,
                                  const RefitOptions& options, std::vector<std::string>* problems) {
  device_->MakeCurrent();
  PrepareDevice(*next);
  DeviceBackend::Stream& stream = *stream_;
  const auto& steps = statics_.steps();
  auto describe = [&](int step) {
    return step >= 0 && step < static_cast<int>(steps.size()) && steps[step].node >= 0
               ? graph_.nodes[steps[step].node].Describe()
               : std::string("a weight copy");
  };
  // However this ends, nothing queued may still touch the buffers afterwards.
  struct Drain {
    DeviceBackend::Stream& s;
    bool armed = true;
    ~Drain() {
      if (!armed) return;
      try {
        s.Finish([](int) { return std::string("a weight copy"); });
      } catch (...) {
      }
    }
  } drain{stream};

  bool device_steps = true, device_writes = false;
  for (size_t i = 0; i < steps.size(); ++i)
    if (dirty_[i] && !steps[i].copy && !device_kernels_[i]) device_steps = false;

  // 1. The weights given: host arrays through staging (or into page-locked
  // buffers, each upload queued as soon as its buffer is written), CUDA
  // tensors device to device once the stream that wrote them is done.
  for (const Write& w : writes_)
    if (w.on_device && options.has_producer_stream) {
      stream.WaitFor(options.producer_stream);
      break;
    }
  // Staged when the derived weights are computed on the device (which reads
  // only the device copies); else each host buffer is written and uploaded.
  jobs_.clear();
  stage_at_.assign(writes_.size(), SIZE_MAX);
  stage_device_ = nullptr;
  const bool staged = device_steps;
  if (staged && !StageHostWrites(next, options, problems)) return;
  trace_.Mark(RefitTrace::kStage);
  for (size_t wi = 0; wi < writes_.size(); ++wi) {
    const Write& w = writes_[wi];
    WeightBuffer* b = next->buffers[w.value];
    const DType dt = statics_.dtype(w.value);
    if (!w.on_device && staged) continue;
    if (!w.on_device) {
      CopyFault fault;
      if (!CopyBlocksParallel(*w.blocks, srcs_.data() + w.first_src, b->host.data(), dt,
                              options.check_finite, &fault, threads_)) {
        problems->push_back("'" + std::string(src_names_[w.first_src + fault.src]) +
                            "' holds a non-finite value at flat index " + std::to_string(fault.index));
        return;
      }
      b->host_current = true;
      stream.CopyInPinned(b->device.get(), b->host.data(), b->host.bytes());
      continue;
    }
    device_writes = true;
    b->host_current = false;
    const int es = static_cast<int>(DTypeSize(dt));
    for (const CopyBlock& blk : *w.blocks) {
      DeviceCopyJob j = CopyJob(blk, static_cast<char*>(b->device.get()), srcs_[w.first_src + blk.src], es);
      j.check = options.check_finite && IsFloat(dt) ? es : 0;
      j.tag = static_cast<int>(w.first_src + blk.src);
      jobs_.push_back(j);
      trace_.Add(RefitTrace::kDeviceBytes, blk.size() * es);
    }
  }
  // Copy steps that need no written buffer go in the same launch (read-only
  // sources, no check: the weights' own jobs check the same elements).
  if (device_steps && paths_.early_steps) {
    write_of_.assign(graph_.values.size(), -1);
    for (size_t i = 0; i < writes_.size(); ++i) write_of_[writes_[i].value] = static_cast<int>(i);
    QueueEarlyCopySteps(*next, given, keys);
  }
  if (!jobs_.empty()) {
    trace_.Add(RefitTrace::kLaunches, 1);
    trace_.Add(RefitTrace::kJobs, static_cast<int64_t>(jobs_.size()));
    stream.CopyElements(jobs_, !paths_.jobs_by_value);
  }
  trace_.Mark(RefitTrace::kWeightLaunch);

  // 2. Derived weights: on the device, or on the host and uploaded.
  if (device_steps) {
    size_t run_start = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      const StaticProgram::Step& s = steps[i];
      if (s.copy) continue;
      QueueCopySteps(*next, run_start, i);
      run_start = i + 1;
      if (!dirty_[i]) continue;
      const Node& node = graph_.nodes[s.node];
      step_srcs_.clear();
      for (int in : node.inputs) step_srcs_.push_back(in >= 0 ? next->device_pointers[in] : nullptr);
      step_outs_.clear();
      for (int out : s.outputs) {
        WeightBuffer* b = out >= 0 ? next->buffers[out] : nullptr;
        step_outs_.push_back(b ? b->device.get() : nullptr);
        if (b) b->host_current = false;
      }
      stream.SetStep(static_cast<int>(i));
      device_kernels_[i]->Run(KernelIO{step_srcs_.data(), step_outs_.data(), device_scratch_.get(),
                                       nullptr, stream.kernel_context()});
      trace_.Add(RefitTrace::kKernelSteps, 1);
    }
    QueueCopySteps(*next, run_start, steps.size());
  } else {
    if (device_writes) {
      for (const Write& w : writes_) {
        WeightBuffer* b = next->buffers[w.value];
        if (w.on_device) stream.CopyOutPinned(b->host.data(), b->device.get(), b->host.bytes());
      }
      stream.Finish(describe);
      for (const Write& w : writes_) next->buffers[w.value]->host_current = true;
    }
    std::vector<int> sources;
    for (size_t i = 0; i < steps.size(); ++i)
      if (dirty_[i]) sources.insert(sources.end(), steps[i].sources.begin(), steps[i].sources.end());
    EnsureHost(*next, sources);
    RunSteps(next);
    for (size_t i = 0; i < steps.size(); ++i) {
      if (!dirty_[i]) continue;
      for (int out : steps[i].outputs) {
        WeightBuffer* b = out >= 0 ? next->buffers[out] : nullptr;
        if (!b) continue;
        b->host_current = true;
        stream.CopyInPinned(b->device.get(), b->host.data(), b->host.bytes());
      }
    }
  }
  trace_.Mark(RefitTrace::kDerived);
  drain.armed = false;
  stream.Finish(describe);
  trace_.Mark(RefitTrace::kWait);
  int tag = 0;
  int64_t index = 0;
  if (options.check_finite && device_writes && stream.TakeCopyFault(&tag, &index))
    problems->push_back("'" + std::string(src_names_[tag]) + "' holds a non-finite value at flat index " +
                        std::to_string(index));
  trace_.Mark(RefitTrace::kFault);
}

void WeightBuilder::EnsureHost(const WeightSet& ws, const std::vector<int>& values) const {
  if (!device_) {
    for (int v : values) fusion_->Restore(ws, v);
    return;
  }
  for (int v : values) {
    WeightBuffer* b = v >= 0 && static_cast<size_t>(v) < ws.buffers.size() ? ws.buffers[v] : nullptr;
    if (!b || b->host_current.load(std::memory_order_acquire)) continue;
    std::lock_guard<std::mutex> lock(b->host_fill_mu);
    if (b->host_current.load(std::memory_order_acquire)) continue;
    device_->Download(b->host.data(), b->device.get(), b->host.bytes());
    b->host_current.store(true, std::memory_order_release);
  }
}

}  // namespace kaiwu
