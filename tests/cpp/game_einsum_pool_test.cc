// Einsum on float64 and with repeated labels (diagonals, traces), and MaxPool's
// Indices output, against brute-force references.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <random>

#include "kernel_harness.h"

namespace kaiwu {
namespace {

using testing::IntAttr;
using testing::IntsAttr;
using testing::MakeNode;
using testing::MakeTensor;
using testing::RunNode;
using testing::StrAttr;

// Brute force over all label assignments; `eq` is explicit and letters-only,
// labels may repeat within an input term.
std::vector<double> RefEinsum(const std::string& eq, const std::vector<Tensor>& ins) {
  std::vector<std::string> terms;
  std::string lhs = eq.substr(0, eq.find("->")), out = eq.substr(eq.find("->") + 2);
  for (size_t s = 0;;) {
    size_t c = lhs.find(',', s);
    terms.push_back(lhs.substr(s, c - s));
    if (c == std::string::npos) break;
    s = c + 1;
  }
  std::map<char, int64_t> size;
  for (size_t i = 0; i < ins.size(); ++i)
    for (size_t d = 0; d < terms[i].size(); ++d) size[terms[i][d]] = ins[i].shape()[d];
  int64_t out_n = 1, total = 1;
  for (char c : out) out_n *= size[c];
  for (auto& [l, s] : size) total *= s;
  std::vector<double> res(out_n, 0.0);
  std::map<char, int64_t> idx;
  for (int64_t it = 0; it < total; ++it) {
    int64_t rem = it;
    for (auto l = size.rbegin(); l != size.rend(); ++l) {
      idx[l->first] = rem % l->second;
      rem /= l->second;
    }
    double prod = 1;
    for (size_t i = 0; i < ins.size(); ++i) {
      int64_t f = 0;
      for (size_t d = 0; d < terms[i].size(); ++d) f = f * ins[i].shape()[d] + idx[terms[i][d]];
      prod *= ins[i].As<double>()[f];
    }
    int64_t o = 0;
    for (char c : out) o = o * size[c] + idx[c];
    res[o] += prod;
  }
  return res;
}

TEST(GameEinsum, Float64AndDiagonals) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> dist(-1, 1);
  struct Case {
    std::string eq, ref_eq;
    std::vector<Shape> shapes;
  };
  std::vector<Case> cases = {
      {"ii->i", "ii->i", {{4, 4}}},
      {"ii", "ii->", {{5, 5}}},
      {"bii->bi", "bii->bi", {{3, 4, 4}}},
      {"bii", "bii->b", {{3, 4, 4}}},
      {"iij,jk->ik", "iij,jk->ik", {{3, 3, 4}, {4, 2}}},
      {"ij,jj->i", "ij,jj->i", {{3, 4}, {4, 4}}},
      {"bij,bjk->bik", "bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}},
      {"bij,bkj->bik", "bij,bkj->bik", {{2, 3, 4}, {2, 5, 4}}},
      {"ij->ji", "ij->ji", {{3, 5}}},
      {"i,i", "i,i->", {{7}, {7}}},
      {"ijk,ikj->i", "ijk,ikj->i", {{2, 3, 4}, {2, 4, 3}}},
  };
  for (int threads : {1, 3})
    for (const Case& c : cases) {
      std::vector<Tensor> ins;
      for (const Shape& s : c.shapes) {
        Tensor t(DType::kFloat64, s);
        for (int64_t i = 0; i < t.size(); ++i) t.As<double>()[i] = dist(rng);
        ins.push_back(std::move(t));
      }
      std::vector<double> want = RefEinsum(c.ref_eq, ins);
      Node node =
          MakeNode("Einsum", static_cast<int>(ins.size()), 1, {{"equation", StrAttr(c.eq)}});
      Tensor y = RunNode(node, ins, threads)[0];
      ASSERT_EQ(y.dtype(), DType::kFloat64) << c.eq;
      ASSERT_EQ(static_cast<size_t>(y.size()), want.size()) << c.eq;
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(y.As<double>()[i], want[i], 1e-12) << c.eq << " at " << i;
    }
}

TEST(GameMaxPool, IndicesRowAndColumnMajor) {
  std::mt19937 rng(8);
  const int64_t N = 2, C = 3, H = 7, W = 6, K = 3, S = 2, P = 1;
  const int64_t OH = (H + 2 * P - K) / S + 1, OW = (W + 2 * P - K) / S + 1;
  std::vector<float> x(N * C * H * W);
  for (auto& v : x) v = static_cast<float>(rng() % 5);  // ties: the first in window order wins
  for (int order : {0, 1}) {
    Node node = MakeNode("MaxPool", 1, 2, {{"kernel_shape", IntsAttr({K, K})},
                                           {"strides", IntsAttr({S, S})},
                                           {"pads", IntsAttr({P, P, P, P})},
                                           {"storage_order", IntAttr(order)}});
    auto out = RunNode(node, {MakeTensor<float>({N, C, H, W}, x)}, 2);
    ASSERT_EQ(out[1].dtype(), DType::kInt64);
    for (int64_t p = 0; p < N * C; ++p)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          float best = -std::numeric_limits<float>::infinity();
          int64_t bi = -1;
          for (int64_t kh = 0; kh < K; ++kh)
            for (int64_t kw = 0; kw < K; ++kw) {
              int64_t ih = oh * S - P + kh, iw = ow * S - P + kw;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              float v = x[(p * H + ih) * W + iw];
              if (v > best) {
                best = v;
                bi = p * H * W + (order ? iw * H + ih : ih * W + iw);
              }
            }
          const int64_t o = (p * OH + oh) * OW + ow;
          ASSERT_EQ(out[0].As<float>()[o], best);
          ASSERT_EQ(out[1].As<int64_t>()[o], bi) << "storage_order " << order << " at " << o;
        }
  }
}

}  // namespace
}  // namespace kaiwu
