// Static values (weights, structural constants and everything computed from
// them alone) as one immutable version, and the program that derives them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/kernel.h"
#include "ir/graph.h"

namespace kaiwu {

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
};

/// The nodes whose inputs are all static. They run once at load and again
/// after each refit (only those downstream of changed weights), so derived
/// weights such as folded BatchNorm or pre-transposed matrices stay exact.
class StaticProgram {
 public:
  /// Classifies `graph`'s nodes; `is_static` (by value id) is filled in.
  StaticProgram(const Graph& graph, std::vector<bool>* is_static,
                std::vector<bool>* depends_on_weight);

  /// Computes derived values into `next`, whose weights are set. When `prev`
  /// is given, nodes whose inputs are unchanged from `prev` reuse its outputs.
  /// The first call prepares the kernels; later calls may run concurrently.
  void Evaluate(const Graph& graph, WeightSet* next, const WeightSet* prev, ThreadPool* pool);
  void Evaluate(const Graph& graph, WeightSet* next, const WeightSet* prev,
                ThreadPool* pool) const;

  const std::vector<int>& nodes() const { return nodes_; }

 private:
  // With `first`, prepares each kernel (writing the members below); otherwise only reads them.
  void Run(const Graph& graph, WeightSet* next, const WeightSet* prev, ThreadPool* pool, bool first);

  std::vector<int> nodes_;
  std::vector<std::unique_ptr<Kernel>> kernels_;  // prepared on first Evaluate
  std::vector<std::vector<TensorInfo>> output_info_;
  std::vector<size_t> scratch_bytes_;
};

}  // namespace kaiwu
