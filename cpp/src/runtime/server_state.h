// The inference server's per-actor store: each connected actor's row count,
// its recurrent state between steps, and how many of its requests are queued
// or running, which the batching policy reads ("is every actor waiting?").
// Not thread-safe: the server calls it under its one mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "runtime/server_layout.h"

namespace kaiwu {

/// One actor's recurrent state: per StateSpec, a [outer, rows, inner] tensor.
using ActorState = std::vector<Tensor>;

/// Zeroed state for `rows` rows of each spec.
std::shared_ptr<ActorState> ZeroState(const std::vector<StateSpec>& specs, int64_t rows);

class ActorStore {
 public:
  /// `specs` (the layout's states, possibly none) must outlive the store.
  explicit ActorStore(const std::vector<StateSpec>& specs) : specs_(specs) {}

  /// Throws kInput when a known recurrent actor may not send a request of
  /// `rows` rows now: it has one in flight, or its kept state has other rows.
  void CheckSubmit(int64_t actor, int64_t rows) const;
  /// Counts a queued request of `rows` rows, connecting the actor if new.
  /// Returns the actor's serial, which tells its requests from those of an
  /// earlier actor of the same id that was released.
  uint64_t Enqueue(int64_t actor, int64_t rows);
  /// A queued request moves into a running batch. Returns the state it steps
  /// from (zeros when the actor has none yet, or fresh zeros when the actor
  /// was released meanwhile); null without state specs.
  std::shared_ptr<ActorState> Start(int64_t actor, uint64_t serial, int64_t rows);
  /// A running request finished.
  void Finish(int64_t actor, uint64_t serial);
  /// Drops an actor's state: its next step starts from zeros.
  void Reset(int64_t actor);
  /// Forgets an actor (state and counts). Returns false if unknown.
  bool Release(int64_t actor);
  /// Every queued request was dropped (the server closed).
  void DropQueued();

  /// Some actor is queued and none is idle: waiting longer gains no rows.
  bool AllWaiting() const {
    return queued_actors_ > 0 && queued_actors_ + running_actors_ >= connected();
  }
  int connected() const { return static_cast<int>(actors_.size()); }
  int queued_actors() const { return queued_actors_; }
  int running_actors() const { return running_actors_; }

 private:
  struct Actor {
    int64_t rows = 0;
    uint64_t serial = 0;
    std::shared_ptr<ActorState> state;  ///< null = zeros on the next step
    int queued = 0;                     ///< queued requests
    int running = 0;                    ///< requests in a running batch
  };
  /// The actor if it is the one that sent `serial`, else null.
  Actor* Find(int64_t actor, uint64_t serial);

  const std::vector<StateSpec>& specs_;
  std::unordered_map<int64_t, Actor> actors_;
  int queued_actors_ = 0, running_actors_ = 0;
  uint64_t serial_ = 0;
};

}  // namespace kaiwu
