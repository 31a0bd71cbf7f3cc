// VersionPool: tags in the order added (latest last), what requests, new
// versions and refits resolve to, removal, and per-version counts.
#include "runtime/server_versions.h"

#include <gtest/gtest.h>

#include "runtime/weight_set.h"
#include "server_test_util.h"

namespace kaiwu {
namespace {

using testing::ExpectErrorContaining;

std::shared_ptr<const WeightSet> Weights(uint64_t v) {
  auto w = std::make_shared<WeightSet>();
  w->version = v;
  return w;
}

TEST(ServerVersions, RequestsResolveToATagAndItsWeights) {
  auto base = Weights(1), x2 = Weights(2);
  VersionPool pool("base", base);
  EXPECT_EQ(pool.latest(), "base");
  pool.Add("x2", x2);
  EXPECT_EQ(pool.latest(), "x2");
  EXPECT_EQ(pool.order(), (std::vector<std::string>{"base", "x2"}));
  std::string tag;
  EXPECT_EQ(pool.ForRequest("", &tag), x2);
  EXPECT_EQ(tag, "x2");
  EXPECT_EQ(pool.ForRequest("base", &tag), base);
  EXPECT_EQ(tag, "base");
  ASSERT_TRUE(pool.Find("base"));
  EXPECT_EQ(*pool.Find("base"), base);
  EXPECT_EQ(pool.Find("nope"), nullptr);
  ExpectErrorContaining([&] { pool.ForRequest("nope", &tag); }, StatusCode::kInput,
                        "unknown weight version 'nope'; the server has 'base', 'x2'");
}

TEST(ServerVersions, NewVersionsStartFromABase) {
  auto base = Weights(1), x2 = Weights(2);
  VersionPool pool("base", base);
  pool.Add("x2", x2);
  EXPECT_EQ(pool.BaseFor("x3", ""), x2);  // latest
  EXPECT_EQ(pool.BaseFor("x3", "base"), base);
  ExpectErrorContaining([&] { pool.BaseFor("", ""); }, StatusCode::kInput,
                        "a version tag must not be empty");
  ExpectErrorContaining([&] { pool.BaseFor("x2", ""); }, StatusCode::kInput,
                        "weight version 'x2' exists; refit it or remove it first");
  ExpectErrorContaining([&] { pool.BaseFor("x3", "old"); }, StatusCode::kInput,
                        "unknown base version 'old'");
  ExpectErrorContaining([&] { pool.Add("base", Weights(3)); }, StatusCode::kInput,
                        "weight version 'base' exists; refit it or remove it first");
  EXPECT_EQ(*pool.Find("base"), base);  // unchanged by the refused Add
}

TEST(ServerVersions, RemoveKeepsOrderAndTheLastVersion) {
  VersionPool pool("a", Weights(1));
  pool.Add("b", Weights(2));
  pool.Add("c", Weights(3));
  pool.Remove("b");
  EXPECT_EQ(pool.order(), (std::vector<std::string>{"a", "c"}));
  pool.Remove("c");
  EXPECT_EQ(pool.latest(), "a");
  ExpectErrorContaining([&] { pool.Remove("c"); }, StatusCode::kInput,
                        "unknown weight version 'c'");
  ExpectErrorContaining([&] { pool.Remove("a"); }, StatusCode::kInput,
                        "cannot remove the last weight version");
}

TEST(ServerVersions, RefitReplacesAVersionsWeightsInPlace) {
  auto a = Weights(1), b = Weights(2), b2 = Weights(3);
  VersionPool pool("a", a);
  pool.Add("b", b);
  std::string tag;
  EXPECT_EQ(pool.RefitSource("", &tag), b);
  EXPECT_EQ(tag, "b");
  pool.Replace(tag, b2);
  EXPECT_EQ(*pool.Find("b"), b2);
  EXPECT_EQ(pool.order(), (std::vector<std::string>{"a", "b"}));  // no new tag
  EXPECT_EQ(pool.RefitSource("a", &tag), a);
  ExpectErrorContaining([&] { pool.RefitSource("z", &tag); }, StatusCode::kRefit,
                        "unknown weight version 'z'");
  pool.Remove("b");
  ExpectErrorContaining([&] { pool.Replace("b", b2); }, StatusCode::kRefit,
                        "weight version 'b' was removed during the refit");
}

TEST(ServerVersions, CountsRequestsAndRowsPerVersion) {
  VersionPool pool("a", Weights(1));
  pool.Add("b", Weights(2));
  std::mt19937 rng(5);
  uint64_t rows[2] = {0, 0}, reqs[2] = {0, 0};
  for (int i = 0; i < 100; ++i) {
    const int v = static_cast<int>(rng() % 2);
    const int64_t n = 1 + rng() % 9;
    pool.Count(v ? "b" : "a", n);
    ++reqs[v];
    rows[v] += n;
  }
  pool.Count("gone", 5);  // a removed version's late requests: not counted
  auto c = pool.Counts();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c["a"], std::make_pair(reqs[0], rows[0]));
  EXPECT_EQ(c["b"], std::make_pair(reqs[1], rows[1]));
  pool.ResetCounts();
  c = pool.Counts();
  EXPECT_EQ(c["a"], std::make_pair(uint64_t{0}, uint64_t{0}));
  EXPECT_EQ(c["b"], std::make_pair(uint64_t{0}, uint64_t{0}));
}

}  // namespace
}  // namespace kaiwu
