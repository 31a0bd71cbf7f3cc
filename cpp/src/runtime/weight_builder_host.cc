// The CPU half of WeightBuilder::Build: the given arrays are read once. Copy
// steps whose sources are all written by this refit (GEMM panels packed from a
// Gemm's or an LSTM's weights) read the given arrays themselves, composed with
// the refit map's blocks; a weight only such steps read is left unwritten
// (stale, restored on demand: RefitFusion). All these copies are independent,
// so they run as one batch on the pool; the remaining steps run after them.
#include "runtime/weight_builder.h"

#include "runtime/weight_pool.h"

namespace kaiwu {

void WeightBuilder::BuildOnHost(WeightSet* next, const WeightSet& base,
                                const std::vector<RefitSource>& given, bool keys,
                                const RefitOptions& options, std::vector<std::string>* problems) {
  const auto& steps = statics_.steps();
  write_of_.assign(graph_.values.size(), -1);
  for (size_t i = 0; i < writes_.size(); ++i) write_of_[writes_[i].value] = static_cast<int>(i);

  // Copy steps computed from the given arrays: every source is written now.
  fused_.assign(steps.size(), 0);
  for (size_t i = 0; i < steps.size(); ++i) {
    const StaticProgram::Step& s = steps[i];
    if (!dirty_[i] || !s.copy || (keys && !fusion_->map_blocks(static_cast<int>(i)))) continue;
    bool all = true;
    for (int v : s.sources) all = all && write_of_[v] >= 0;
    fused_[i] = all;
  }
  // Weights that only fused steps read are not written.
  skip_.assign(writes_.size(), 0);
  for (size_t w = 0; w < writes_.size(); ++w) {
    const int v = writes_[w].value;
    if (!fusion_->skippable(v)) continue;
    bool all = true;
    for (int i : fusion_->consumers(v)) all = all && fused_[i];
    skip_[w] = all;
  }
  // Steps run from the stored values read them current: a weight left stale
  // by an earlier refit is restored from the base version first.
  for (size_t i = 0; i < steps.size(); ++i)
    if (dirty_[i] && !fused_[i])
      for (int v : steps[i].sources)
        if (write_of_[v] < 0) fusion_->Restore(base, v);
  for (size_t v = 0; v < next->buffers.size(); ++v)
    if (changed_[v] && next->buffers[v])
      next->buffers[v]->host_current.store(true, std::memory_order_relaxed);
  for (size_t w = 0; w < writes_.size(); ++w)
    if (skip_[w])
      next->buffers[writes_[w].value]->host_current.store(false, std::memory_order_relaxed);

  // One batch: the writes kept and the fused steps.
  copy_jobs_.clear();
  job_names_.clear();
  job_name_list_.clear();
  job_srcs_.clear();
  for (size_t w = 0; w < writes_.size(); ++w) {
    if (skip_[w]) continue;
    const Write& wr = writes_[w];
    job_names_.push_back(job_name_list_.size());
    for (size_t k = 0; k < wr.num_src; ++k) {
      job_srcs_.push_back(srcs_[wr.first_src + k]);
      job_name_list_.push_back(src_names_[wr.first_src + k]);
    }
    copy_jobs_.push_back(CopyTask{wr.blocks, nullptr, next->buffers[wr.value]->host.data(),
                                 statics_.dtype(wr.value)});
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    if (!fused_[i]) continue;
    const StaticProgram::Step& s = steps[i];
    const std::vector<CopyBlock>* blocks = &s.blocks;
    job_names_.push_back(job_name_list_.size());
    if (keys) {
      blocks = fusion_->map_blocks(static_cast<int>(i));
      for (int k : fusion_->map_keys(static_cast<int>(i))) {
        const RefitSource& src = given[key_src_[k]];
        job_srcs_.push_back(src.view.data);
        job_name_list_.push_back(src.name);
      }
    } else {
      for (int v : s.sources) {
        const Write& wr = writes_[write_of_[v]];  // a whole weight: one source
        job_srcs_.push_back(srcs_[wr.first_src]);
        job_name_list_.push_back(src_names_[wr.first_src]);
      }
    }
    const int out = s.outputs[0];
    copy_jobs_.push_back(
        CopyTask{blocks, nullptr, next->buffers[out]->host.data(), statics_.dtype(out)});
    dirty_[i] = 0;  // done: RunSteps leaves it
  }
  // Source lists are stable now: point the jobs at them.
  for (size_t j = 0; j < copy_jobs_.size(); ++j)
    copy_jobs_[j].srcs = job_srcs_.data() + job_names_[j];

  CopyFault fault;
  size_t job = 0;
  if (!CopyTasksParallel(copy_jobs_, options.check_finite, &fault, &job, threads_)) {
    problems->push_back("'" + std::string(job_name_list_[job_names_[job] + fault.src]) +
                        "' holds a non-finite value at flat index " + std::to_string(fault.index));
    return;
  }
  RunSteps(next);
}

}  // namespace kaiwu
