#include "runtime/server_versions.h"

#include <algorithm>

namespace kaiwu {

VersionPool::VersionPool(const std::string& base_tag, std::shared_ptr<const WeightSet> base) {
  versions_[base_tag].weights = std::move(base);
  order_.push_back(base_tag);
}

const std::shared_ptr<const WeightSet>* VersionPool::Find(const std::string& tag) const {
  auto it = versions_.find(tag);
  return it == versions_.end() ? nullptr : &it->second.weights;
}

const std::shared_ptr<const WeightSet>& VersionPool::ForRequest(const std::string& tag,
                                                                std::string* resolved) const {
  *resolved = tag.empty() ? order_.back() : tag;
  auto it = versions_.find(*resolved);
  if (it == versions_.end()) {
    std::string known;
    for (const auto& t : order_) known += (known.empty() ? "'" : ", '") + t + "'";
    Fail(StatusCode::kInput, "unknown weight version '", *resolved, "'; the server has ", known);
  }
  return it->second.weights;
}

std::shared_ptr<const WeightSet> VersionPool::BaseFor(const std::string& tag,
                                                      const std::string& base) const {
  KAIWU_CHECK(!tag.empty(), StatusCode::kInput, "a version tag must not be empty");
  KAIWU_CHECK(!versions_.count(tag), StatusCode::kInput, "weight version '", tag,
              "' exists; refit it or remove it first");
  const std::string& b = base.empty() ? order_.back() : base;
  auto it = versions_.find(b);
  KAIWU_CHECK(it != versions_.end(), StatusCode::kInput, "unknown base version '", b, "'");
  return it->second.weights;
}

void VersionPool::Add(const std::string& tag, std::shared_ptr<const WeightSet> weights) {
  KAIWU_CHECK(!versions_.count(tag), StatusCode::kInput, "weight version '", tag,
              "' exists; refit it or remove it first");
  versions_[tag].weights = std::move(weights);
  order_.push_back(tag);
}

void VersionPool::Remove(const std::string& tag) {
  auto it = versions_.find(tag);
  KAIWU_CHECK(it != versions_.end(), StatusCode::kInput, "unknown weight version '", tag, "'");
  KAIWU_CHECK(versions_.size() > 1, StatusCode::kInput, "cannot remove the last weight version");
  versions_.erase(it);  // queued requests keep their own reference to the weights
  order_.erase(std::find(order_.begin(), order_.end(), tag));
}

std::shared_ptr<const WeightSet> VersionPool::RefitSource(const std::string& tag,
                                                          std::string* resolved) const {
  *resolved = tag.empty() ? order_.back() : tag;
  auto it = versions_.find(*resolved);
  KAIWU_CHECK(it != versions_.end(), StatusCode::kRefit, "unknown weight version '", *resolved,
              "'");
  return it->second.weights;
}

void VersionPool::Replace(const std::string& tag, std::shared_ptr<const WeightSet> weights) {
  auto it = versions_.find(tag);
  KAIWU_CHECK(it != versions_.end(), StatusCode::kRefit, "weight version '", tag,
              "' was removed during the refit");
  it->second.weights = std::move(weights);
}

void VersionPool::Count(const std::string& tag, int64_t rows) {
  auto it = versions_.find(tag);
  if (it == versions_.end()) return;
  ++it->second.requests;
  it->second.rows += rows;
}

void VersionPool::ResetCounts() {
  for (auto& [tag, v] : versions_) v.requests = v.rows = 0;
}

std::map<std::string, std::pair<uint64_t, uint64_t>> VersionPool::Counts() const {
  std::map<std::string, std::pair<uint64_t, uint64_t>> c;
  for (const auto& [tag, v] : versions_) c[tag] = {v.requests, v.rows};
  return c;
}

}  // namespace kaiwu
