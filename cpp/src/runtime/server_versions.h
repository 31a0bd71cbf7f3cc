// The inference server's pool of weight versions: named WeightSets that share
// one compiled graph (so league play can step old and new policies side by
// side), the order they were added in (the last is "latest"), and how many
// requests and rows each served. Not thread-safe: the server calls it under
// its one mutex, and builds new WeightSets outside it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kaiwu/session.h"

namespace kaiwu {

class VersionPool {
 public:
  VersionPool(const std::string& base_tag, std::shared_ptr<const WeightSet> base);

  /// Weights of `tag`, or null if there is no such version.
  const std::shared_ptr<const WeightSet>* Find(const std::string& tag) const;
  /// What a request asking for `tag` ("" = latest) runs on: sets *resolved to
  /// the tag and returns its weights. Throws kInput listing the versions.
  const std::shared_ptr<const WeightSet>& ForRequest(const std::string& tag,
                                                     std::string* resolved) const;
  /// Weights a new version `tag` starts from ("" = latest). Throws kInput if
  /// `tag` is empty or exists, or `base` is unknown.
  std::shared_ptr<const WeightSet> BaseFor(const std::string& tag, const std::string& base) const;
  /// Adds `tag` as the latest version. Throws kInput if it exists.
  void Add(const std::string& tag, std::shared_ptr<const WeightSet> weights);
  /// Removes `tag`; requests holding its weights keep them. Throws kInput if
  /// unknown or the last version.
  void Remove(const std::string& tag);
  /// The version a refit of `tag` ("" = latest) replaces: sets *resolved and
  /// returns its weights. Throws kRefit if unknown.
  std::shared_ptr<const WeightSet> RefitSource(const std::string& tag, std::string* resolved) const;
  /// Publishes refit weights for `tag`. Throws kRefit if it was removed.
  void Replace(const std::string& tag, std::shared_ptr<const WeightSet> weights);

  /// Counts a request of `rows` rows served by `tag` (gone versions: ignored).
  void Count(const std::string& tag, int64_t rows);
  void ResetCounts();
  /// Per version: requests, rows.
  std::map<std::string, std::pair<uint64_t, uint64_t>> Counts() const;

  const std::vector<std::string>& order() const { return order_; }  ///< latest last
  const std::string& latest() const { return order_.back(); }

 private:
  struct Version {
    std::shared_ptr<const WeightSet> weights;
    uint64_t requests = 0, rows = 0;
  };
  std::map<std::string, Version> versions_;
  std::vector<std::string> order_;
};

}  // namespace kaiwu
