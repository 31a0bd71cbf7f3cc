#include "runtime/server_state.h"

#include <cstring>

namespace kaiwu {

std::shared_ptr<ActorState> ZeroState(const std::vector<StateSpec>& specs, int64_t rows) {
  auto st = std::make_shared<ActorState>();
  for (const auto& s : specs) {
    Tensor t(s.dtype, Shape{s.outer, rows, s.inner});
    std::memset(t.data(), 0, t.bytes());
    st->push_back(std::move(t));
  }
  return st;
}

void ActorStore::CheckSubmit(int64_t actor, int64_t rows) const {
  if (specs_.empty()) return;
  auto it = actors_.find(actor);
  if (it == actors_.end()) return;
  const Actor& a = it->second;
  KAIWU_CHECK(a.queued + a.running == 0, StatusCode::kInput, "actor ", actor,
              " already has a request in flight; a recurrent actor steps one request at a time");
  KAIWU_CHECK(!a.state || a.rows == rows, StatusCode::kInput, "actor ", actor, " keeps state for ",
              a.rows, " rows but sent ", rows,
              "; release (or reset) it before changing its row count");
}

uint64_t ActorStore::Enqueue(int64_t actor, int64_t rows) {
  auto [it, added] = actors_.try_emplace(actor);
  Actor& a = it->second;
  if (added) a.serial = ++serial_;
  a.rows = rows;
  if (a.queued++ == 0) ++queued_actors_;
  return a.serial;
}

ActorStore::Actor* ActorStore::Find(int64_t actor, uint64_t serial) {
  auto it = actors_.find(actor);
  return it != actors_.end() && it->second.serial == serial ? &it->second : nullptr;
}

std::shared_ptr<ActorState> ActorStore::Start(int64_t actor, uint64_t serial, int64_t rows) {
  std::shared_ptr<ActorState> st;
  if (Actor* a = Find(actor, serial)) {
    if (--a->queued == 0) --queued_actors_;
    if (a->running++ == 0) ++running_actors_;
    if (!specs_.empty() && !a->state) a->state = ZeroState(specs_, rows);
    st = a->state;
  }
  if (!st && !specs_.empty()) st = ZeroState(specs_, rows);  // released while queued
  return st;
}

void ActorStore::Finish(int64_t actor, uint64_t serial) {
  if (Actor* a = Find(actor, serial))
    if (--a->running == 0) --running_actors_;
}

void ActorStore::Reset(int64_t actor) {
  auto it = actors_.find(actor);
  if (it != actors_.end()) it->second.state.reset();
}

bool ActorStore::Release(int64_t actor) {
  auto it = actors_.find(actor);
  if (it == actors_.end()) return false;
  if (it->second.queued > 0) --queued_actors_;
  if (it->second.running > 0) --running_actors_;
  actors_.erase(it);
  return true;
}

void ActorStore::DropQueued() {
  queued_actors_ = 0;
  for (auto& [id, a] : actors_) a.queued = 0;
}

}  // namespace kaiwu
