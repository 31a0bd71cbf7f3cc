// CPU refit in one pass over the caller's arrays: a copy step of the static
// program (an LSTM's or a Gemm's weight packed into GEMM panels, a transposed
// matrix) whose sources are all written by the refit is computed straight from
// the arrays the refit is given, and a weight that only such steps read is not
// copied at all. Its buffer is then stale: the values are in the step's output,
// and Restore() copies them back (blocks inverting the step) when something on
// the host asks for the weight itself (GetWeights, a later refit that changes
// only another source of the step).
#pragma once

#include <mutex>
#include <vector>

#include "ir/graph.h"
#include "runtime/block_copy.h"
#include "runtime/refit_map.h"
#include "runtime/weight_set.h"

namespace kaiwu {

/// Blocks of `outer` (over `num_outer` sources) composed with the blocks each
/// of those sources is written with: inner[s] reads sources inner_keys[s]
/// (global ids). Returns blocks over `keys` (the global ids read, in order of
/// first use); false when a source of `outer` has no inner blocks.
bool ComposeBlocks(const std::vector<CopyBlock>& outer, int64_t outer_size,
                   const std::vector<const std::vector<CopyBlock>*>& inner,
                   const std::vector<const std::vector<int>*>& inner_keys,
                   const std::vector<int64_t>& inner_sizes, std::vector<CopyBlock>* blocks,
                   std::vector<int>* keys);

/// Whether `blocks` read every element of source `src` (of `n` elements).
bool CoversSource(const std::vector<CopyBlock>& blocks, int32_t src, int64_t n);

/// Blocks writing source `src` (of `n` elements) back from the destination of
/// `blocks`; false unless the blocks read every element of it.
bool InvertBlocks(const std::vector<CopyBlock>& blocks, int32_t src, int64_t n,
                  std::vector<CopyBlock>* out);

class RefitFusion {
 public:
  /// Which weights of `graph` only copy steps of `statics` read (CPU sessions).
  RefitFusion(const Graph& graph, const StaticProgram& statics, const std::vector<int>& weight_ids);

  /// Composes the copy steps with the entries of `map` (null: none).
  void SetMap(const RefitMap* map);

  /// Whether a refit that writes `value` may leave it unwritten when every
  /// copy step reading it is fused.
  bool skippable(int value) const { return skippable_[value]; }
  /// The copy steps that read `value`.
  const std::vector<int>& consumers(int value) const { return consumers_[value]; }
  /// Step `step` composed with the refit map's entries of its sources: blocks
  /// over map keys (`map_keys`); null when it cannot be.
  const std::vector<CopyBlock>* map_blocks(int step) const {
    return map_ok_[step] ? &map_blocks_[step] : nullptr;
  }
  const std::vector<int>& map_keys(int step) const { return map_keys_[step]; }

  /// Makes the host copy of weight `value` in `ws` current (CPU sessions).
  void Restore(const WeightSet& ws, int value) const;

 private:
  const Graph& graph_;
  const StaticProgram& statics_;
  std::vector<char> skippable_;                 // by value id
  std::vector<std::vector<int>> consumers_;     // by value id: copy steps reading it
  std::vector<int> cover_;  // by value id: a step whose output holds every element
  mutable std::mutex restore_mu_;  // guards the two below
  mutable std::vector<std::vector<CopyBlock>> restore_;  // by value id: from cover_'s output
  mutable std::vector<char> restore_ready_;
  std::vector<char> map_ok_;                    // by step
  std::vector<std::vector<CopyBlock>> map_blocks_;
  std::vector<std::vector<int>> map_keys_;
};

}  // namespace kaiwu
