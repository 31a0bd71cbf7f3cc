// The refit map compiled against a model: state_dict keys by name, and each
// weight as copy blocks over the keys it reads (gate repacking, transposes and
// ties included), so that a refit from a state_dict is one pass of copies.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "kaiwu/session.h"
#include "runtime/block_copy.h"

namespace kaiwu {

class RefitMap {
 public:
  struct Entry {
    int value = -1;           ///< the weight written (value id)
    std::vector<int> keys;    ///< key indices read; blocks' src indexes this list
    std::vector<CopyBlock> blocks;
  };

  /// Throws kRefit when an entry names a value that is not a weight of
  /// `graph`, a key the map does not declare, or elements out of range.
  RefitMap(const RefitMapSpec& spec, const Graph& graph);

  const std::vector<RefitMapSpec::Key>& keys() const { return keys_; }
  const std::vector<Entry>& entries() const { return entries_; }

  /// What a name is to the map.
  enum class Kind { kUnknown, kKey, kAlias, kIgnorable };
  /// The kind of `name`, and for kKey and kAlias the key index it reads.
  Kind Find(std::string_view name, int* key) const;

 private:
  std::vector<RefitMapSpec::Key> keys_;
  std::vector<std::string> names_;  // aliases and ignorable names (stable storage)
  std::unordered_map<std::string_view, std::pair<Kind, int>> by_name_;
  std::vector<Entry> entries_;
};

}  // namespace kaiwu
