// KAIWU_REFIT_LEGACY parsing (runtime/refit_paths.h): "1"/"all" restore every
// earlier path, a comma list restores the named ones, and a word only counts
// as a whole list item.
#include <gtest/gtest.h>

#include <cstdlib>

#include "runtime/refit_paths.h"

namespace kaiwu {
namespace {

RefitPaths With(const char* value) {
  if (value) setenv("KAIWU_REFIT_LEGACY", value, 1);
  else unsetenv("KAIWU_REFIT_LEGACY");
  RefitPaths p = RefitPaths::FromEnv();
  unsetenv("KAIWU_REFIT_LEGACY");
  return p;
}

void Expect(const RefitPaths& p, bool jobs, bool steps, const char* what) {
  EXPECT_EQ(p.jobs_by_value, jobs) << what;
  EXPECT_EQ(p.early_steps, steps) << what;
}

TEST(RefitPaths, ReadsTheLegacySwitch) {
  Expect(With(nullptr), true, true, "unset");
  Expect(With(""), true, true, "empty");
  Expect(With("0"), true, true, "0");
  Expect(With("1"), false, false, "1");
  Expect(With("all"), false, false, "all");
  Expect(With("jobs"), false, true, "jobs");
  Expect(With("steps"), true, false, "steps");
  Expect(With("steps,jobs"), false, false, "steps,jobs");
  Expect(With("other,jobs"), false, true, "other,jobs");
  Expect(With("jobsx,xsteps,step"), true, true, "no whole word");
}

}  // namespace
}  // namespace kaiwu
