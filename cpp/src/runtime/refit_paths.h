// Which paths a device refit takes, read at every refit from the environment
// so that a benchmark compares them in one process. KAIWU_REFIT_LEGACY="1"
// (or "all") restores every earlier path; else a comma-separated list of:
//   jobs   each launch's job table copied to the device before it (instead of
//          travelling in the launch's parameters);
//   steps  copy steps of derived weights launched after the weights are
//          written (instead of reading the refit's sources in the same launch).
// Not switched: the finite check's fault word is read back with the refit's
// final wait (cuda_backend.cc), one synchronization instead of two.
#pragma once

#include <cstdlib>
#include <cstring>

namespace kaiwu {

struct RefitPaths {
  bool jobs_by_value = true;
  bool early_steps = true;

  static RefitPaths FromEnv() {
    RefitPaths p;
    const char* env = std::getenv("KAIWU_REFIT_LEGACY");
    if (!env || !*env || std::strcmp(env, "0") == 0) return p;
    const bool all = std::strcmp(env, "1") == 0 || std::strcmp(env, "all") == 0;
    auto named = [&](const char* word) {
      const size_t n = std::strlen(word);
      for (const char* at = std::strstr(env, word); at; at = std::strstr(at + 1, word))
        if ((at == env || at[-1] == ',') && (at[n] == ',' || at[n] == '\0')) return true;
      return false;
    };
    p.jobs_by_value = !(all || named("jobs"));
    p.early_steps = !(all || named("steps"));
    return p;
  }
};

}  // namespace kaiwu
