#include "runtime/weight_builder.h"

#include <sstream>

#include "backends/device.h"
#include "core/thread_pool.h"
#include "runtime/weight_pool.h"

namespace kaiwu {

WeightBuilder::WeightBuilder(const Graph& graph, const StaticProgram& statics,
                             const std::vector<int>& weight_ids, ThreadPool* threads,
                             const DeviceBackend* device)
    : graph_(graph),
      statics_(statics),
      threads_(threads),
      device_(device),
      pool_(std::make_shared<WeightPool>(graph.values.size(), device)) {
  whole_.resize(graph.values.size());
  for (int v : weight_ids) {
    weight_by_name_.emplace(std::string_view(graph.values[v].name), v);
    CopyBlock b;
    b.cols = NumElements(statics.shape(v));
    b.row_stride = b.cols;
    whole_[v].push_back(b);
  }
  fusion_ = std::make_unique<RefitFusion>(graph, statics, weight_ids);
}

WeightBuilder::~WeightBuilder() = default;

void WeightBuilder::SetMap(const RefitMapSpec& spec) {
  auto map = std::make_unique<RefitMap>(spec, graph_);
  std::lock_guard<std::mutex> lock(mu_);
  map_ = std::move(map);
  if (fusion_) fusion_->SetMap(map_.get());
}

bool WeightBuilder::has_map() const { return map_ != nullptr; }

WeightMemoryStats WeightBuilder::memory() const { return pool_->stats(); }

bool WeightBuilder::UsesKeys(const std::vector<RefitSource>& given) {
  if (!map_ || given.empty()) return false;
  kinds_.resize(given.size());
  key_of_.resize(given.size());
  size_t known = 0, engine = 0;
  for (size_t i = 0; i < given.size(); ++i) {
    kinds_[i] = map_->Find(given[i].name, &key_of_[i]);
    known += kinds_[i] != RefitMap::Kind::kUnknown;
    engine += weight_by_name_.count(given[i].name);
  }
  return known == given.size() || known > engine;
}

bool WeightBuilder::Check(const RefitSource& s, DType dtype, const Shape& shape,
                          std::vector<std::string>* problems) const {
  const std::string name(s.name);
  if (s.view.dtype != dtype) {
    problems->push_back("'" + name + "' has dtype " + DTypeName(s.view.dtype) + ", expected " +
                        DTypeName(dtype));
    return false;
  }
  if (s.view.shape != shape) {
    problems->push_back("'" + name + "' has shape " + ShapeToString(s.view.shape) +
                        ", expected " + ShapeToString(shape));
    return false;
  }
  if (s.device >= 0 && (!device_ || device_->ordinal() != s.device)) {
    problems->push_back("'" + name + "' is in the memory of cuda:" + std::to_string(s.device) +
                        ", but this session runs on " + (device_ ? device_->name() : "the CPU"));
    return false;
  }
  if (s.view.size() > 0 && !s.view.data) {
    problems->push_back("'" + name + "' has no data");
    return false;
  }
  return true;
}

void WeightBuilder::AddWrite(int value, const std::vector<CopyBlock>* blocks,
                             const std::vector<const RefitSource*>& sources) {
  Write w{value, blocks, srcs_.size(), sources.size(), false};
  for (const RefitSource* s : sources) {
    srcs_.push_back(s->view.data);
    src_names_.push_back(s->name);
    src_device_.push_back(s->device >= 0);
    w.on_device = w.on_device || s->device >= 0;
  }
  writes_.push_back(w);
}

void WeightBuilder::ResolveWeights(const std::vector<RefitSource>& given,
                                   const RefitOptions& options, Session::RefitReport* report,
                                   std::vector<std::string>* problems) {
  given_weight_.assign(graph_.values.size(), 0);
  for (const RefitSource& s : given) {
    auto it = weight_by_name_.find(s.name);
    if (it == weight_by_name_.end()) {
      if (options.strict) problems->push_back("'" + std::string(s.name) + "' is not a weight of this model");
      else report->ignored.emplace_back(s.name);
      continue;
    }
    const int v = it->second;
    if (given_weight_[v]) continue;  // named twice: the first wins
    given_weight_[v] = 1;
    if (!Check(s, statics_.dtype(v), statics_.shape(v), problems)) continue;
    entry_srcs_.assign(1, &s);
    AddWrite(v, &whole_[v], entry_srcs_);
    report->updated.emplace_back(s.name);
  }
  if (options.strict)
    for (const auto& [name, v] : weight_by_name_)
      if (!given_weight_[v]) problems->push_back("'" + std::string(name) + "' is missing (strict=True)");
}

void WeightBuilder::ResolveKeys(const std::vector<RefitSource>& given, const RefitOptions& options,
                                Session::RefitReport* report, std::vector<std::string>* problems) {
  const auto& keys = map_->keys();
  direct_.assign(keys.size(), 0);
  named_.assign(keys.size(), 0);
  key_src_.assign(keys.size(), -1);
  for (size_t i = 0; i < given.size(); ++i)
    if (kinds_[i] == RefitMap::Kind::kKey) direct_[key_of_[i]] = 1;
  for (size_t i = 0; i < given.size(); ++i) {
    const RefitSource& s = given[i];
    const int k = key_of_[i];
    switch (kinds_[i]) {
      case RefitMap::Kind::kUnknown:
        if (options.strict)
          problems->push_back("'" + std::string(s.name) +
                              "' is not a key of the exported module's state_dict");
        else
          report->ignored.emplace_back(s.name);
        continue;
      case RefitMap::Kind::kIgnorable:
        report->ignored.emplace_back(s.name);
        continue;
      case RefitMap::Kind::kAlias:
        if (direct_[k] || key_src_[k] >= 0) {  // tied: the key itself is given too
          report->ignored.emplace_back(s.name);
          continue;
        }
        break;
      case RefitMap::Kind::kKey:
        break;
    }
    named_[k] = 1;
    if (Check(s, keys[k].dtype, keys[k].shape, problems)) key_src_[k] = static_cast<int>(i);
  }
  if (options.strict)
    for (size_t k = 0; k < keys.size(); ++k)
      if (!named_[k]) problems->push_back("'" + keys[k].name + "' is missing (strict=True)");
  if (!problems->empty()) return;
  for (const RefitMap::Entry& e : map_->entries()) {
    entry_srcs_.clear();
    for (int k : e.keys) {
      if (key_src_[k] < 0) break;
      entry_srcs_.push_back(&given[key_src_[k]]);
    }
    if (entry_srcs_.size() != e.keys.size()) continue;  // non-strict: left as it is
    AddWrite(e.value, &e.blocks, entry_srcs_);
    report->updated.push_back(graph_.values[e.value].name);
  }
}

std::shared_ptr<WeightSet> WeightBuilder::Assemble(const WeightSet& base) {
  const size_t nv = graph_.values.size();
  auto next = std::make_shared<WeightSet>();
  next->pool = pool_;
  next->values = base.values;
  next->pointers = base.pointers;
  next->device_values = base.device_values;
  next->device_pointers = base.device_pointers;
  next->buffers.assign(nv, nullptr);
  for (size_t v = 0; v < nv; ++v) {
    if (statics_.dropped(static_cast<int>(v))) {
      next->values[v] = nullptr;
      next->pointers[v] = nullptr;
      if (!next->device_values.empty()) {
        next->device_values[v] = nullptr;
        next->device_pointers[v] = nullptr;
      }
    } else if (!changed_[v] && v < base.buffers.size()) {
      next->buffers[v] = base.buffers[v];
    }
  }
  pool_->Hold(next->buffers);
  for (size_t v = 0; v < nv; ++v) {
    if (!changed_[v] || statics_.dtype(static_cast<int>(v)) == DType::kUndefined) continue;
    WeightBuffer* b = pool_->Acquire(static_cast<int>(v), statics_.dtype(static_cast<int>(v)),
                                     statics_.shape(static_cast<int>(v)));
    next->buffers[v] = b;
    next->values[v] = std::shared_ptr<const Tensor>(pool_, &b->host);
    next->pointers[v] = b->host.data();
    if (b->device) {
      next->device_values[v] = std::shared_ptr<void>(pool_, b->device.get());
      next->device_pointers[v] = b->device.get();
    }
  }
  return next;
}

void WeightBuilder::RunSteps(WeightSet* next) {
  const auto& steps = statics_.steps();
  scratch_.resize(statics_.scratch_bytes() + 64);
  for (size_t i = 0; i < steps.size(); ++i) {
    if (!dirty_[i]) continue;
    const StaticProgram::Step& s = steps[i];
    if (s.copy) {
      step_srcs_.clear();
      for (int v : s.sources) step_srcs_.push_back(next->pointers[v]);
      CopyFault fault;
      const int out = s.outputs[0];
      CopyBlocksParallel(s.blocks, step_srcs_.data(), next->buffers[out]->host.data(),
                         statics_.dtype(out), false, &fault, threads_);
      continue;
    }
    step_outs_.clear();
    for (int out : s.outputs)
      step_outs_.push_back(out >= 0 && next->buffers[out] ? next->buffers[out]->host.data() : nullptr);
    statics_.RunKernel(s, next->pointers, step_outs_.data(), scratch_.data(), threads_);
  }
}

std::shared_ptr<const WeightSet> WeightBuilder::Build(const std::vector<RefitSource>& given,
                                                      const RefitOptions& options,
                                                      Session::RefitReport* report_out,
                                                      const WeightSet& base) {
  std::lock_guard<std::mutex> lock(mu_);
  trace_.Start();
  paths_ = RefitPaths::FromEnv();
  Session::RefitReport report;
  std::vector<std::string> problems;
  writes_.clear();
  srcs_.clear();
  src_names_.clear();
  src_device_.clear();
  const bool keys = UsesKeys(given);
  if (keys) ResolveKeys(given, options, &report, &problems);
  else ResolveWeights(given, options, &report, &problems);
  for (const Write& w : writes_) {
    for (size_t i = 0; i < w.num_src && w.on_device; ++i)
      if (!src_device_[w.first_src + i])
        problems.push_back("'" + graph_.values[w.value].name +
                           "' comes from tensors in host and in device memory; give them in one place");
  }
  auto refuse = [&] {
    std::ostringstream os;
    os << "refit refused, weights unchanged (version " << base.version << "):";
    for (const auto& p : problems) os << "\n  " << p;
    throw Error(StatusCode::kRefit, os.str());
  };
  if (!problems.empty()) refuse();
  trace_.Mark(RefitTrace::kResolve);

  // What changes: the values written and every step downstream of them.
  const auto& steps = statics_.steps();
  changed_.assign(graph_.values.size(), 0);
  dirty_.assign(steps.size(), 0);
  for (const Write& w : writes_) changed_[w.value] = 1;
  for (size_t i = 0; i < steps.size(); ++i) {
    for (int v : steps[i].sources) dirty_[i] = dirty_[i] || changed_[v];
    if (dirty_[i])
      for (int out : steps[i].outputs)
        if (out >= 0) changed_[out] = 1;
  }
  std::shared_ptr<WeightSet> next = Assemble(base);
  next->version = base.version + 1;
  trace_.Mark(RefitTrace::kAssemble);

  if (device_) {
    BuildOnDevice(next.get(), given, keys, options, &problems);
    if (!problems.empty()) refuse();
  } else {
    BuildOnHost(next.get(), base, given, keys, options, &problems);
    if (!problems.empty()) refuse();
  }
  report.version = next->version;
  if (report_out) *report_out = std::move(report);
  return next;
}


}  // namespace kaiwu
