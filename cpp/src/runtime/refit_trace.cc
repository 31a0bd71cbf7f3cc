#include "runtime/refit_trace.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kaiwu {

RefitTrace::RefitTrace() {
  const char* env = std::getenv("KAIWU_REFIT_TRACE");
  on_ = env && *env && std::strcmp(env, "0") != 0;
}

RefitTrace::~RefitTrace() {
  if (!on_ || refits_ == 0) return;
  static const char* const phases[] = {"resolve", "assemble", "stage", "weight_launch",
                                       "derived", "wait",     "fault"};
  static const char* const counts[] = {"launches",    "jobs",         "kernel_steps", "copy_steps",
                                       "early_steps", "staged_bytes", "device_bytes"};
  static_assert(sizeof(phases) / sizeof(phases[0]) == kNumPhases, "a name per phase");
  static_assert(sizeof(counts) / sizeof(counts[0]) == kNumCounts, "a name per count");
  const double n = static_cast<double>(refits_);
  double total = 0;
  std::fprintf(stderr, "refit trace: %lld refits, us per refit:", static_cast<long long>(refits_));
  for (int p = 0; p < kNumPhases; ++p) {
    std::fprintf(stderr, " %s %.1f", phases[p], 1e6 * seconds_[p] / n);
    total += seconds_[p];
  }
  std::fprintf(stderr, " total %.1f; per refit:", 1e6 * total / n);
  for (int c = 0; c < kNumCounts; ++c)
    std::fprintf(stderr, " %s %.1f", counts[c], static_cast<double>(counts_[c]) / n);
  std::fprintf(stderr, "\n");
}

}  // namespace kaiwu
