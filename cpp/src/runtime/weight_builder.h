// Builds weight versions: resolves what a refit is given (weight names, or a
// refit map's keys), validates it, copies it into pooled storage in one pass
// (the finite check fused in), recomputes the derived values downstream and,
// on a device, brings the version's device copies up to date.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backends/device.h"
#include "kaiwu/session.h"
#include "runtime/refit_fusion.h"
#include "runtime/refit_map.h"
#include "runtime/refit_paths.h"
#include "runtime/refit_trace.h"
#include "runtime/weight_set.h"

namespace kaiwu {

class ThreadPool;
class WeightPool;

class WeightBuilder {
 public:
  /// `graph`, `statics` and `threads` outlive the builder. `device`: null on the CPU.
  WeightBuilder(const Graph& graph, const StaticProgram& statics, const std::vector<int>& weight_ids,
                ThreadPool* threads, const DeviceBackend* device);
  ~WeightBuilder();

  void SetMap(const RefitMapSpec& spec);
  bool has_map() const;

  /// A new version: `base` with the given weights replaced and everything
  /// derived from them recomputed. Throws kRefit naming every problem (then
  /// nothing changed). Thread-safe (builds run one at a time).
  std::shared_ptr<const WeightSet> Build(const std::vector<RefitSource>& given,
                                         const RefitOptions& options, Session::RefitReport* report,
                                         const WeightSet& base);

  /// Device sessions: makes the host copies of `values` in `ws` current (a
  /// refit from device memory leaves them on the device only).
  void EnsureHost(const WeightSet& ws, const std::vector<int>& values) const;

  WeightMemoryStats memory() const;

 private:
  struct Write {
    int value;
    const std::vector<CopyBlock>* blocks;
    size_t first_src, num_src;  // into srcs_ / src_names_
    bool on_device;             // sources in device memory
  };
  bool UsesKeys(const std::vector<RefitSource>& given);
  void ResolveWeights(const std::vector<RefitSource>& given, const RefitOptions& options,
                      Session::RefitReport* report, std::vector<std::string>* problems);
  void ResolveKeys(const std::vector<RefitSource>& given, const RefitOptions& options,
                   Session::RefitReport* report, std::vector<std::string>* problems);
  bool Check(const RefitSource& s, DType dtype, const Shape& shape,
             std::vector<std::string>* problems) const;
  void AddWrite(int value, const std::vector<CopyBlock>* blocks,
                const std::vector<const RefitSource*>& sources);
  std::shared_ptr<WeightSet> Assemble(const WeightSet& base);
  void RunSteps(WeightSet* next);
  // weight_builder_host.cc: copies and derived values of a CPU session, the
  // copy steps whose sources are all given computed from the given arrays.
  void BuildOnHost(WeightSet* next, const WeightSet& base, const std::vector<RefitSource>& given,
                   bool keys, const RefitOptions& options, std::vector<std::string>* problems);
  // weight_builder_device.cc: copies, derived values and uploads of a device session.
  void BuildOnDevice(WeightSet* next, const std::vector<RefitSource>& given, bool keys,
                     const RefitOptions& options, std::vector<std::string>* problems);
  // Appends to jobs_ the dirty copy steps that can read this refit's sources
  // (or unchanged values) directly, so they run in the weights' own launch;
  // clears their dirty_ bits.
  void QueueEarlyCopySteps(const WeightSet& next, const std::vector<RefitSource>& given, bool keys);
  // Where a copy step may read value `v` in the weights' launch: a given
  // device tensor or staged array holding all of it, or the unchanged
  // buffer; null when only the written buffer has it.
  const void* EarlySource(const WeightSet& next, int v) const;
  // weight_builder_staging.cc: the host arrays of a device refit through the
  // pool's staging, each chunk's upload queued by the thread that copies its
  // last piece while the others go on copying; appends to jobs_ the device
  // copies from staging into `next`'s buffers.
  bool StageHostWrites(WeightSet* next, const RefitOptions& options,
                       std::vector<std::string>* problems);
  void PrepareDevice(const WeightSet& ws);
  void QueueCopySteps(const WeightSet& next, size_t begin, size_t end);

  const Graph& graph_;
  const StaticProgram& statics_;
  ThreadPool* threads_;
  const DeviceBackend* device_;
  std::shared_ptr<WeightPool> pool_;
  std::unique_ptr<RefitMap> map_;
  std::unique_ptr<RefitFusion> fusion_;  // composed copy steps (device sessions: no skipping)
  RefitPaths paths_;                     // read at each build
  RefitTrace trace_;
  // Device sessions: a stream beside the runs' streams, and the static program's
  // kernel steps prepared for the device (null where the device has no kernel).
  std::unique_ptr<DeviceBackend::Stream> stream_;
  bool device_prepared_ = false;
  std::vector<std::unique_ptr<Kernel>> device_kernels_;
  std::shared_ptr<void> device_scratch_;
  std::vector<DeviceCopyJob> jobs_;
  std::unordered_map<std::string_view, int> weight_by_name_;  // value id
  std::vector<std::vector<CopyBlock>> whole_;                 // by value id: one block, all of it

  // Scratch of one build, kept between builds so that a refit allocates nothing.
  std::mutex mu_;
  std::vector<Write> writes_;
  std::vector<const void*> srcs_;
  std::vector<std::string_view> src_names_;
  std::vector<char> src_device_;  // by source: in device memory
  std::vector<const RefitSource*> entry_srcs_;
  std::vector<RefitMap::Kind> kinds_;
  std::vector<int> key_of_, key_src_;
  std::vector<char> direct_, named_, given_weight_, changed_, dirty_;
  std::vector<const void*> step_srcs_;
  std::vector<void*> step_outs_;
  std::vector<char> scratch_;
  std::vector<int> write_of_;        // by value id: index in writes_, or -1
  std::vector<char> fused_, skip_;   // by step; by write
  std::vector<CopyTask> copy_jobs_;
  std::vector<size_t> job_names_;    // by job: first entry in job_name_list_
  std::vector<std::string_view> job_name_list_;
  std::vector<const void*> job_srcs_;
  std::vector<size_t> stage_write_;   // by staged task: index in writes_
  std::vector<size_t> stage_offset_;  // by staged task: byte offset in staging
  std::vector<CopyTask> stage_tasks_;
  std::vector<CopyPiece> stage_pieces_;
  std::vector<uint32_t> stage_chunk_;             // by staged piece: its chunk
  std::vector<CopyFault> stage_faults_;           // by staged piece
  std::vector<char> stage_failed_;                // by staged piece
  std::vector<std::pair<size_t, size_t>> stage_ranges_;  // by chunk: staging bytes [lo, hi)
  std::vector<size_t> stage_at_;                        // by write: byte offset in staging, or SIZE_MAX
  const char* stage_device_ = nullptr;                  // the device staging of this build
  std::unique_ptr<std::atomic<int32_t>[]> stage_left_;   // by chunk: pieces not yet copied
  size_t stage_left_capacity_ = 0;
};

}  // namespace kaiwu
