// The block algebra of the one-pass CPU refit: a copy step composed with the
// blocks that write its sources (LSTM gate repacking, then GEMM panels) equals
// running the two one after the other; inverted blocks give the source back;
// a batch of independent copies on the pool equals the copies one by one and
// names the first non-finite value in job order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "runtime/block_copy.h"
#include "runtime/refit_fusion.h"

namespace kaiwu {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(gen);
  return v;
}

// Gate repacking of an LSTM weight [4H, K] (torch order i, f, g, o -> ONNX i, o, f, c)
// from one key, as runs.
std::vector<CopyBlock> GateRuns(int64_t h, int64_t k) {
  std::vector<CopyBlock> blocks;
  const int64_t order[] = {0, 3, 1, 2};
  for (int64_t g = 0; g < 4; ++g) {
    CopyBlock b;
    b.src_offset = order[g] * h * k;
    b.cols = h * k;
    b.row_stride = b.cols;
    b.dst_offset = g * h * k;
    blocks.push_back(b);
  }
  return blocks;
}

TEST(RefitFusion, ComposedBlocksEqualTwoPasses) {
  const int64_t h = 32, k = 48, n = 4 * h * k;
  const std::vector<float> key = Random(n, 3);
  const std::vector<CopyBlock> inner = GateRuns(h, k);
  // Panels of the repacked weight: [4H, K] -> [4H / 16, K, 16].
  std::vector<int64_t> index = TransposeIndex({4 * h / 16, 16, k}, {0, 2, 1});
  const std::vector<CopyBlock> outer = CompressElementMap(nullptr, index.data(), n);

  std::vector<float> mid(static_cast<size_t>(n)), two(static_cast<size_t>(n));
  const void* k_src[] = {key.data()};
  const void* m_src[] = {mid.data()};
  CopyFault fault;
  ASSERT_TRUE(CopyBlocks(inner, k_src, mid.data(), DType::kFloat32, false, &fault));
  ASSERT_TRUE(CopyBlocks(outer, m_src, two.data(), DType::kFloat32, false, &fault));

  const std::vector<int> inner_keys = {7};  // global key id
  std::vector<CopyBlock> composed;
  std::vector<int> keys;
  ASSERT_TRUE(ComposeBlocks(outer, n, {&inner}, {&inner_keys}, {n}, &composed, &keys));
  EXPECT_EQ(keys, std::vector<int>{7});
  EXPECT_EQ(composed.size(), static_cast<size_t>(4 * h / 16));  // one block per panel
  std::vector<float> one(static_cast<size_t>(n), -1.0f);
  ASSERT_TRUE(CopyBlocks(composed, k_src, one.data(), DType::kFloat32, false, &fault));
  EXPECT_EQ(one, two);

  // Inverting the panels gives the repacked weight back.
  std::vector<CopyBlock> back;
  ASSERT_TRUE(InvertBlocks(outer, 0, n, &back));
  std::vector<float> restored(static_cast<size_t>(n), -1.0f);
  const void* p_src[] = {two.data()};
  ASSERT_TRUE(CopyBlocks(back, p_src, restored.data(), DType::kFloat32, false, &fault));
  EXPECT_EQ(restored, mid);
}

TEST(RefitFusion, ComposeFromTwoSourcesAndRefusals) {
  // A Concat of two weights, each copied from its own key.
  const int64_t a = 40, b = 24;
  CopyBlock whole_a, whole_b;
  whole_a.cols = whole_a.row_stride = a;
  whole_b.cols = whole_b.row_stride = b;
  const std::vector<CopyBlock> inner_a = {whole_a}, inner_b = {whole_b};
  std::vector<int32_t> src;
  std::vector<int64_t> index;
  for (int64_t i = 0; i < b; ++i) src.push_back(1), index.push_back(i);
  for (int64_t i = 0; i < a; ++i) src.push_back(0), index.push_back(i);
  const std::vector<CopyBlock> outer = CompressElementMap(src.data(), index.data(), a + b);
  const std::vector<int> keys_a = {3}, keys_b = {5};
  std::vector<CopyBlock> composed;
  std::vector<int> keys;
  ASSERT_TRUE(ComposeBlocks(outer, a + b, {&inner_a, &inner_b}, {&keys_a, &keys_b}, {a, b},
                            &composed, &keys));
  EXPECT_EQ(keys, (std::vector<int>{5, 3}));  // in order of first use
  const std::vector<float> ka = Random(a, 1), kb = Random(b, 2);
  const void* srcs[] = {kb.data(), ka.data()};
  std::vector<float> out(static_cast<size_t>(a + b));
  CopyFault fault;
  ASSERT_TRUE(CopyBlocks(composed, srcs, out.data(), DType::kFloat32, false, &fault));
  for (int64_t i = 0; i < a + b; ++i) ASSERT_EQ(out[i], i < b ? kb[i] : ka[i - b]) << i;

  // A source without blocks, and a source only partly read (not invertible).
  EXPECT_FALSE(ComposeBlocks(outer, a + b, {&inner_a, nullptr}, {&keys_a, nullptr}, {a, b},
                             &composed, &keys));
  std::vector<CopyBlock> back;
  CopyBlock half;
  half.cols = half.row_stride = a / 2;
  EXPECT_FALSE(InvertBlocks({half}, 0, a, &back));
}

TEST(RefitFusion, CopyTasksInOneBatchEqualSerialCopies) {
  ThreadPool pool(2);
  const int64_t n = 512, k = 640;  // large enough to be split across the pool
  const std::vector<float> w = Random(n * k, 5), v = Random(1000, 6);
  std::vector<int64_t> index = TransposeIndex({n / 16, 16, k}, {0, 2, 1});
  const std::vector<CopyBlock> panels = CompressElementMap(nullptr, index.data(), n * k);
  CopyBlock run;
  run.cols = run.row_stride = 1000;
  const std::vector<CopyBlock> plain = {run};
  std::vector<float> out_w(static_cast<size_t>(n * k)), out_v(1000), want_w(out_w.size());
  const void* w_src[] = {w.data()};
  const void* v_src[] = {v.data()};
  std::vector<CopyTask> tasks = {{&plain, v_src, out_v.data(), DType::kFloat32},
                                 {&panels, w_src, out_w.data(), DType::kFloat32}};
  CopyFault fault;
  size_t task = 99;
  ASSERT_TRUE(CopyTasksParallel(tasks, true, &fault, &task, &pool));
  ASSERT_TRUE(CopyBlocks(panels, w_src, want_w.data(), DType::kFloat32, false, &fault));
  EXPECT_EQ(out_w, want_w);
  EXPECT_EQ(out_v, v);

  std::vector<float> bad = w;
  bad[n * k - 777] = std::nanf("");
  const void* bad_src[] = {bad.data()};
  tasks[1].srcs = bad_src;
  EXPECT_FALSE(CopyTasksParallel(tasks, true, &fault, &task, &pool));
  EXPECT_EQ(task, 1u);
  EXPECT_EQ(fault.index, n * k - 777);
  // Small batches run in place, with the same answer.
  CopyBlock one;
  one.cols = one.row_stride = 8;
  const std::vector<CopyBlock> small = {one};
  std::vector<CopyTask> few = {{&small, v_src, out_v.data(), DType::kFloat32},
                               {&small, bad_src, out_w.data(), DType::kFloat32}};
  bad[3] = INFINITY;
  EXPECT_FALSE(CopyTasksParallel(few, true, &fault, &task, &pool));
  EXPECT_EQ(task, 1u);
  EXPECT_EQ(fault.index, 3);
}

}  // namespace
}  // namespace kaiwu
