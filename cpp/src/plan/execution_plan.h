// An execution plan for one input-shape signature: prepared kernels in order,
// values folded at plan time, and a static memory plan. Immutable once built;
// many threads may Run it at once, each with a pooled arena.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/device.h"
#include "backends/kernel.h"
#include "ir/graph.h"
#include "runtime/weight_set.h"

namespace kaiwu {

/// What the planner needs to know about a graph beyond the graph itself.
struct PlanInputs {
  const Graph* graph;
  const std::vector<int>* runtime_nodes;   // nodes not in the static program
  const std::vector<bool>* is_static;      // by value id
  const std::vector<bool>* depends_on_weight;
  const WeightSet* weights;                // any version: shapes never change on refit
  int num_threads = 1;
  /// Per graph input: its data when the plan depends on its values (inputs that
  /// feed shape operands, keyed by value in the plan cache), else null.
  const std::vector<const void*>* input_values = nullptr;
  /// Where the kernels run: null for the CPU. A device plan keeps inputs,
  /// intermediates and outputs in device memory and reads weights from
  /// WeightSet::device_pointers.
  const DeviceBackend* device = nullptr;
};

class ExecutionPlan {
 public:
  ExecutionPlan(const PlanInputs& in, const std::vector<Shape>& input_shapes);
  ~ExecutionPlan();

  /// Dtype and shape of each graph output.
  const std::vector<TensorInfo>& outputs() const { return outputs_; }
  /// Byte offsets of each output in one block of `output_block_bytes()`.
  const std::vector<size_t>& output_offsets() const { return output_offsets_; }
  size_t output_block_bytes() const { return output_block_bytes_; }
  size_t arena_bytes() const { return arena_bytes_; }
  size_t num_steps() const { return steps_.size(); }

  /// feeds: one pointer per graph input; outputs: one writable pointer per
  /// graph output, sized per outputs(); in host memory, except on a device
  /// plan where `io` says where each lives (null: pageable host memory) and
  /// which caller streams order the run. Does not allocate once warm.
  void Run(const void* const* feeds, void* const* outputs, const WeightSet& weights,
           ThreadPool* pool, double* step_seconds = nullptr,
           const DeviceRunIO* io = nullptr) const;

  /// For profiling: the node index and output shape of each step.
  int step_node(size_t i) const { return steps_[i].node; }
  Shape step_output_shape(size_t i) const { return step_shapes_[i]; }

 private:
  enum class Slot : uint8_t { kUnused, kInput, kStatic, kConst, kArena, kOutput, kAlias };
  struct Step {
    const Kernel* kernel;
    int node;
    int in_begin, in_count, out_begin, out_count;
    size_t scratch_offset;
  };
  struct RunContext;

  std::unique_ptr<RunContext> NewContext() const;
  /// Removes the steps whose outputs no running step reads (`unused`: per step,
  /// the inputs its kernel declared unread), keeping the order of the rest.
  void DropUnreadSteps(const Graph& g, const std::vector<std::vector<bool>>& unused);
  /// Points the context's flat input/output lists at step `s`'s buffers.
  KernelIO BindStep(RunContext& ctx, const Step& s, char* arena, ThreadPool* pool,
                    const void* device) const;
  void RunOnDevice(RunContext& ctx, const void* const* feeds, void* const* outputs,
                   const WeightSet& weights, double* step_seconds, const DeviceRunIO* io) const;

  std::vector<std::unique_ptr<Kernel>> kernels_;
  std::vector<Step> steps_;
  std::vector<int> step_inputs_, step_outputs_;  // value ids, flat; -1 omitted
  std::vector<Slot> slot_;
  std::vector<size_t> arena_offset_;             // for kArena
  std::vector<int> alias_root_;                  // for kAlias, in creation order
  std::vector<size_t> alias_bytes_;              // each alias's start in its root's buffer
  std::vector<int> alias_order_;
  std::vector<std::shared_ptr<Tensor>> consts_;  // by value id, folded at plan time
  const DeviceBackend* device_ = nullptr;
  uint32_t device_needs_ = 0;  ///< DeviceNeed bits of the device kernels' steps
  std::vector<std::shared_ptr<void>> device_consts_;  // by value id: device copies of consts_
  std::vector<size_t> input_bytes_;                   // per graph input (device plans)
  std::vector<std::string> step_names_;               // node descriptions, for device errors
  std::vector<int> input_values_, output_values_, static_values_used_;
  std::vector<std::pair<int, int>> output_copies_;  // (output index, source value)
  std::vector<TensorInfo> outputs_;
  std::vector<Shape> step_shapes_;  // first output's shape per step
  std::vector<size_t> output_offsets_;
  size_t output_block_bytes_ = 0;
  size_t arena_bytes_ = 0;

  mutable std::mutex contexts_mu_;
  mutable std::vector<std::unique_ptr<RunContext>> free_contexts_;
};

}  // namespace kaiwu
