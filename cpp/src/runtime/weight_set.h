// Static values (weights, structural constants and everything computed from
// them alone) as one immutable version, and the program that derives them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/kernel.h"
#include "ir/graph.h"
#include "runtime/block_copy.h"

namespace kaiwu {

class WeightPool;
struct WeightBuffer;

/// One version of all static values. Never modified once published: runs hold
/// a shared_ptr for their whole duration, refit publishes a new set.
struct WeightSet {
  uint64_t version = 0;
  std::vector<std::shared_ptr<const Tensor>> values;  // by value id; null if not static
  std::vector<const void*> pointers;                  // values[i]->data(), or null
  /// For a session on a device: device copies of `values`, by value id (empty
  /// on the CPU). A new version shares the copies of the values it shares.
  std::vector<std::shared_ptr<void>> device_values;
  std::vector<const void*> device_pointers;
  /// Pooled storage this version holds, by value id (null: not pooled). Its
  /// `values` entries keep the pool alive, not the buffer: a buffer is reused
  /// once no version holds it, so keep the WeightSet, never a value alone.
  std::shared_ptr<WeightPool> pool;
  std::vector<WeightBuffer*> buffers;

  WeightSet() = default;
  WeightSet(const WeightSet&) = delete;
  WeightSet& operator=(const WeightSet&) = delete;
  ~WeightSet();
};

/// The nodes whose inputs are all static. They run once at load and again
/// after each refit (only those downstream of changed weights), so derived
/// weights such as folded BatchNorm or pre-transposed matrices stay exact.
/// Chains of data-movement nodes (Slice, Concat, Transpose, Reshape...; an
/// LSTM's gate repacking) become copy steps: blocks straight from the values
/// they start at, with no intermediate tensors.
class StaticProgram {
 public:
  /// Classifies `graph`'s nodes; `is_static` (by value id) is filled in.
  StaticProgram(const Graph& graph, std::vector<bool>* is_static,
                std::vector<bool>* depends_on_weight);

  /// At load: computes every static value of `ws` (whose weights and
  /// constants are set) into new tensors, prepares the kernels, then compiles
  /// the data-movement chains into copy steps, checked against the kernels.
  void Load(const Graph& graph, WeightSet* ws, ThreadPool* pool);

  /// One step of a refit, in dependency order: a kernel step runs `node`; a
  /// copy step writes value `outputs[0]` with `blocks` over `sources`.
  struct Step {
    int node = -1;
    bool copy = false;
    std::vector<int> sources;  // value ids read: block sources, or the node's inputs
    std::vector<int> outputs;  // value ids written (-1: not present)
    std::vector<CopyBlock> blocks;
  };
  const std::vector<Step>& steps() const { return steps_; }
  /// Values only the copy steps' chains used: refitted versions leave them out.
  bool dropped(int value) const { return dropped_[value]; }
  /// Whether a value depends on a weight (a refit may change it).
  bool from_weight(int value) const { return value >= 0 && from_weight_[value]; }
  /// dtype and shape of every static value (from the load).
  DType dtype(int value) const { return dtypes_[value]; }
  const Shape& shape(int value) const { return shapes_[value]; }
  size_t scratch_bytes() const { return max_scratch_; }
  /// Runs a kernel step: `ptr` by value id for its inputs, `outputs` per node output.
  void RunKernel(const Step& step, const std::vector<const void*>& ptr, void* const* outputs,
                 void* scratch, ThreadPool* pool) const;
  /// The nodes evaluated at load (every static node), in order.
  const std::vector<int>& nodes() const { return nodes_; }
  /// The node kernel `node` was prepared with at load (null: not a static node).
  const PrepareContext* prepared(int node) const;

 private:
  void CompileCopies(const Graph& graph, const WeightSet& ws);

  std::vector<int> nodes_;
  std::vector<std::unique_ptr<Kernel>> kernels_;  // by position in nodes_
  std::vector<std::unique_ptr<PrepareContext>> contexts_;
  std::vector<int> position_;                     // by node index: position in nodes_, or -1
  std::vector<Step> steps_;
  std::vector<bool> dropped_;
  std::vector<bool> from_weight_;  // by value id: depends on a weight
  std::vector<DType> dtypes_;
  std::vector<Shape> shapes_;
  size_t max_scratch_ = 0;
};

}  // namespace kaiwu
