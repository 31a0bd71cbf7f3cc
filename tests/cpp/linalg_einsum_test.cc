// Einsum against a brute-force float64 reference over all label assignments.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "linalg_test_util.h"

namespace kaiwu {
namespace {

using testing::ExpectNear;
using testing::MakeNode;
using testing::RandomTensor;
using testing::RunNode;
using testing::StrAttr;

// `eq` uses letters only and an explicit output.
std::vector<double> RefEinsum(const std::string& eq, const std::vector<Tensor>& ins,
                              Shape* out_shape) {
  std::vector<std::string> terms;
  std::string lhs = eq.substr(0, eq.find("->")), out = eq.substr(eq.find("->") + 2);
  size_t start = 0;
  for (;;) {
    size_t c = lhs.find(',', start);
    terms.push_back(lhs.substr(start, c - start));
    if (c == std::string::npos) break;
    start = c + 1;
  }
  std::map<char, int64_t> size;
  for (size_t i = 0; i < ins.size(); ++i)
    for (size_t d = 0; d < terms[i].size(); ++d)
      size[terms[i][d]] = std::max(size[terms[i][d]], ins[i].shape()[d]);
  std::vector<char> labels;
  for (auto& [l, s] : size) labels.push_back(l);
  out_shape->clear();
  for (char c : out) out_shape->push_back(size[c]);
  std::vector<double> res(NumElements(*out_shape), 0.0);
  std::map<char, int64_t> idx;
  for (char l : labels) idx[l] = 0;
  int64_t total = 1;
  for (char l : labels) total *= size[l];
  for (int64_t it = 0; it < total; ++it) {
    int64_t rem = it;
    for (auto l = labels.rbegin(); l != labels.rend(); ++l) {
      idx[*l] = rem % size[*l];
      rem /= size[*l];
    }
    double prod = 1;
    for (size_t i = 0; i < ins.size(); ++i) {
      int64_t f = 0;
      for (size_t d = 0; d < terms[i].size(); ++d) {
        int64_t dim = ins[i].shape()[d];
        f = f * dim + (dim == 1 ? 0 : idx[terms[i][d]]);
      }
      prod *= ins[i].As<float>()[f];
    }
    int64_t o = 0;
    for (char c : out) o = o * size[c] + idx[c];
    res[o] += prod;
  }
  return res;
}

struct Case {
  std::string eq;         // given to the kernel
  std::string ref_eq;     // letters-only explicit form for the reference
  std::vector<Shape> shapes;
};

TEST(LinalgEinsum, Equations) {
  std::mt19937 rng(5);
  std::vector<Case> cases = {
      {"bij,bjk->bik", "bij,bjk->bik", {{3, 4, 5}, {3, 5, 6}}},
      {"bhqd,bhkd->bhqk", "bhqd,bhkd->bhqk", {{2, 3, 5, 8}, {2, 3, 7, 8}}},
      {"bhqk,bhkd->bhqd", "bhqk,bhkd->bhqd", {{2, 3, 5, 7}, {2, 3, 7, 8}}},
      {"bi,ij->bj", "bi,ij->bj", {{6, 5}, {5, 4}}},
      {"bi,bi->b", "bi,bi->b", {{9, 17}, {9, 17}}},
      {"ij->ji", "ij->ji", {{4, 7}}},
      {"bn,anm,bm->ba", "bn,anm,bm->ba", {{3, 4}, {5, 4, 6}, {3, 6}}},
      {"bij,bjk", "bij,bjk->ik", {{2, 3, 4}, {2, 4, 5}}},  // b summed
      {"ij,jk", "ij,jk->ik", {{3, 4}, {4, 5}}},
      {"ba,ab", "ba,ab->", {{3, 4}, {4, 3}}},
      {"ij->i", "ij->i", {{5, 6}}},
      {"ijk->", "ijk->", {{2, 3, 4}}},
      {"ijk->kji", "ijk->kji", {{2, 3, 4}}},
      {"ij,k->ikj", "ij,k->ikj", {{2, 3}, {4}}},
      {"ij,jk->i", "ij,jk->i", {{3, 4}, {4, 5}}},
      {"bhqd,bkhd->bqhk", "bhqd,bkhd->bqhk", {{2, 3, 4, 5}, {2, 6, 3, 5}}},
      {"...ij,...jk->...ik", "zij,zjk->zik", {{3, 4, 5}, {3, 5, 2}}},
      {"b...d,d->b...", "bxd,d->bx", {{2, 3, 4}, {4}}},
      {"ij,ij->ij", "ij,ij->ij", {{3, 5}, {3, 5}}},
      {"bij,bjk->bik", "bij,bjk->bik", {{1, 4, 5}, {3, 5, 6}}},  // broadcast batch
      {"i,j->ij", "i,j->ij", {{40}, {50}}},
  };
  for (int threads : {1, 3})
    for (const Case& c : cases) {
      std::vector<Tensor> ins;
      for (const Shape& s : c.shapes) ins.push_back(RandomTensor(s, rng));
      Shape want_shape;
      std::vector<double> want = RefEinsum(c.ref_eq, ins, &want_shape);
      Node node = MakeNode("Einsum", static_cast<int>(ins.size()), 1, {{"equation", StrAttr(c.eq)}});
      Tensor y = RunNode(node, ins, threads)[0];
      ExpectNear(y, want_shape, want, c.eq);
    }
}

TEST(LinalgEinsum, RejectsBadEquations) {
  std::mt19937 rng(6);
  auto run = [&](const std::string& eq, std::vector<Shape> shapes) {
    std::vector<Tensor> ins;
    for (const Shape& s : shapes) ins.push_back(RandomTensor(s, rng));
    Node node = MakeNode("Einsum", static_cast<int>(ins.size()), 1, {{"equation", StrAttr(eq)}});
    return RunNode(node, ins);
  };
  EXPECT_THROW(run("i->ii", {{3}}), Error);             // repeated output label
  EXPECT_THROW(run("ij,jk->ik", {{3, 4}, {5, 6}}), Error);  // size mismatch
  EXPECT_THROW(run("ij->k", {{3, 4}}), Error);           // unknown output label
  EXPECT_THROW(run("ijk->i", {{3, 4}}), Error);          // rank mismatch
  EXPECT_THROW(run("ij,jk->ik", {{3, 4}}), Error);       // operand count
  EXPECT_THROW(run("i1->i", {{3, 4}}), Error);           // bad character
}

}  // namespace
}  // namespace kaiwu
