// Where a device refit's time goes: with KAIWU_REFIT_TRACE=1 (read when the
// session is made) the weight builder adds each refit's phase times and
// counts, and prints their means per refit to stderr when it is destroyed
// (with its session). The first two refits, which fill the weight pool, are
// left out. Off, each mark is one branch.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

namespace kaiwu {

class RefitTrace {
 public:
  enum Phase {
    kResolve,       // names looked up, sources checked
    kAssemble,      // the new version's buffers taken from the pool
    kStage,         // host arrays into page-locked staging, uploads queued
    kWeightLaunch,  // the weights' device copies queued (one launch)
    kDerived,       // derived weights queued (kernels, copy-step launches)
    kWait,          // waiting for the refit's stream
    kFault,         // reading the finite check's result
    kNumPhases
  };
  enum Count {
    kLaunches,      // copy launches
    kJobs,          // copy jobs in them
    kKernelSteps,   // derived-weight kernels run on the device
    kCopySteps,     // copy steps in later launches
    kEarlySteps,    // copy steps in the weights' launch
    kStagedBytes,   // host bytes through staging
    kDeviceBytes,   // bytes read from device sources
    kNumCounts
  };

  RefitTrace();
  ~RefitTrace();
  bool on() const { return on_; }
  /// Starts a refit's timing.
  void Start() {
    active_ = on_ && ++seen_ > kLeftOut;
    if (!active_) return;
    ++refits_;
    last_ = Clock::now();
  }
  /// The time since the last mark goes to `p`.
  void Mark(Phase p) {
    if (!active_) return;
    const auto now = Clock::now();
    seconds_[p] += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }
  void Add(Count c, int64_t n) {
    if (active_) counts_[c] += n;
  }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr int64_t kLeftOut = 2;
  bool on_ = false, active_ = false;
  int64_t seen_ = 0, refits_ = 0;
  Clock::time_point last_;
  std::array<double, kNumPhases> seconds_{};
  std::array<int64_t, kNumCounts> counts_{};
};

}  // namespace kaiwu
