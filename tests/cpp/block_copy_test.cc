// CopyBlocks against the element map it was compressed from: plain runs,
// transposes (the prepacked-GEMM panel layout and odd sizes that leave 8 x 8
// tile edges), several sources, and the fused finite check naming the element.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "runtime/block_copy.h"

namespace kaiwu {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(gen);
  return v;
}

// Copies with the compressed blocks and checks every element against the map.
void ExpectMatchesMap(const std::vector<int64_t>& index, const std::vector<float>& src) {
  const int64_t n = static_cast<int64_t>(index.size());
  std::vector<CopyBlock> blocks = CompressElementMap(nullptr, index.data(), n);
  std::vector<float> out(static_cast<size_t>(n), -1.0f);
  const void* srcs[] = {src.data()};
  CopyFault fault;
  ASSERT_TRUE(CopyBlocks(blocks, srcs, out.data(), DType::kFloat32, false, &fault));
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], src[index[i]]) << "element " << i;
}

TEST(BlockCopy, TransposesOfEverySizeClass) {
  // [rows, cols] -> [cols, rows], including sizes that are not multiples of 8.
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {3, 5}, {8, 8}, {9, 17}, {64, 3}, {31, 64}, {100, 33}, {256, 256}}) {
    SCOPED_TRACE(testing::Message() << rows << " x " << cols);
    const std::vector<float> src = Random(rows * cols, static_cast<uint32_t>(rows * 131 + cols));
    ExpectMatchesMap(TransposeIndex({rows, cols}, {1, 0}), src);
  }
}

TEST(BlockCopy, PrepackedPanelLayout) {
  // W [N, K] with N = panels x 16 -> [panels, K, 16], as prepack_gemm packs trans_b weights.
  for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{16, 7}, {32, 3136}, {48, 513}}) {
    SCOPED_TRACE(testing::Message() << n << " x " << k);
    const std::vector<float> src = Random(n * k, static_cast<uint32_t>(n + k));
    std::vector<int64_t> index = TransposeIndex({n / 16, 16, k}, {0, 2, 1});
    std::vector<CopyBlock> blocks = CompressElementMap(nullptr, index.data(), n * k);
    EXPECT_EQ(blocks.size(), static_cast<size_t>(n / 16));  // one strided block per panel
    ExpectMatchesMap(index, src);
  }
}

TEST(BlockCopy, ConvPanelsReadAcrossBothAxes) {
  // W [co, ci, kk] -> [co / width, kk, ci, width], as conv weights are packed
  // into panels: blocks read with neither stride 1 (the gathered rows), at
  // panel widths that are and are not multiples of 8, in float32 and float64.
  for (auto [co, ci, kk, width] : std::vector<std::array<int64_t, 4>>{
           {32, 32, 9, 16}, {24, 5, 9, 12}, {14, 3, 4, 7}, {48, 16, 1, 16}}) {
    SCOPED_TRACE(testing::Message() << co << " x " << ci << " x " << kk << " / " << width);
    const int64_t n = co * ci * kk;
    std::vector<int64_t> index = TransposeIndex({co / width, width, ci, kk}, {0, 3, 2, 1});
    std::vector<CopyBlock> blocks = CompressElementMap(nullptr, index.data(), n);
    if (kk > 1 && ci > 1)
      for (const CopyBlock& b : blocks) EXPECT_TRUE(b.row_stride != 1 && b.col_stride != 1);
    const std::vector<float> src = Random(n, static_cast<uint32_t>(n + width));
    ExpectMatchesMap(index, src);
    std::vector<double> src64(src.begin(), src.end()), out64(static_cast<size_t>(n), -1.0);
    const void* srcs64[] = {src64.data()};
    CopyFault fault;
    ASSERT_TRUE(CopyBlocks(blocks, srcs64, out64.data(), DType::kFloat64, true, &fault));
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out64[i], src64[index[i]]) << "element " << i;
    // The finite check names the source element of the first bad value.
    std::vector<float> bad = src;
    const int64_t at = n - 2 * kk - 1;
    bad[at] = -INFINITY;
    std::vector<float> out(static_cast<size_t>(n));
    const void* bad_srcs[] = {bad.data()};
    EXPECT_FALSE(CopyBlocks(blocks, bad_srcs, out.data(), DType::kFloat32, true, &fault));
    EXPECT_EQ(fault.index, at);
  }
}

TEST(BlockCopy, RunsFromSeveralSourcesAndFiniteCheck) {
  const std::vector<float> a = Random(40, 1), b = Random(40, 2);
  // Destination: a[0:20], b[10:30], a[20:40] (LSTM gate repacking in small).
  std::vector<int32_t> src;
  std::vector<int64_t> index;
  for (int64_t i = 0; i < 20; ++i) src.push_back(0), index.push_back(i);
  for (int64_t i = 10; i < 30; ++i) src.push_back(1), index.push_back(i);
  for (int64_t i = 20; i < 40; ++i) src.push_back(0), index.push_back(i);
  std::vector<CopyBlock> blocks = CompressElementMap(src.data(), index.data(), 60);
  std::vector<float> out(60);
  const void* srcs[] = {a.data(), b.data()};
  CopyFault fault;
  ASSERT_TRUE(CopyBlocks(blocks, srcs, out.data(), DType::kFloat32, true, &fault));
  for (int64_t i = 0; i < 60; ++i)
    ASSERT_EQ(out[i], (src[i] ? b : a)[index[i]]) << "element " << i;
  std::vector<float> bad = b;
  bad[17] = std::nanf("");
  const void* bad_srcs[] = {a.data(), bad.data()};
  EXPECT_FALSE(CopyBlocks(blocks, bad_srcs, out.data(), DType::kFloat32, true, &fault));
  EXPECT_EQ(fault.src, 1);
  EXPECT_EQ(fault.index, 17);
}

TEST(BlockCopy, TransposeWithFiniteCheckNamesTheElement) {
  const int64_t rows = 24, cols = 16;
  std::vector<float> src = Random(rows * cols, 9);
  src[5 * rows + 11] = INFINITY;  // source row 5, column 11
  std::vector<int64_t> index = TransposeIndex({cols, rows}, {1, 0});
  std::vector<CopyBlock> blocks = CompressElementMap(nullptr, index.data(), rows * cols);
  std::vector<float> out(static_cast<size_t>(rows * cols));
  const void* srcs[] = {src.data()};
  CopyFault fault;
  EXPECT_FALSE(CopyBlocks(blocks, srcs, out.data(), DType::kFloat32, true, &fault));
  EXPECT_EQ(fault.index, 5 * rows + 11);
}

TEST(BlockCopy, TransposeFiniteCheckAcrossRowRanges) {
  // Checked transposes run in row ranges (their source runs checked as they are read):
  // a clean copy equals the map, and a bad value in the first, a later or the last range
  // is named, through CopyBlocks and through streamed pieces (the device staging).
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1000, 16}, {5000, 3}, {37, 64}}) {
    SCOPED_TRACE(testing::Message() << rows << " x " << cols);
    const std::vector<float> src = Random(rows * cols, static_cast<uint32_t>(rows + cols));
    std::vector<int64_t> index = TransposeIndex({cols, rows}, {1, 0});
    std::vector<CopyBlock> blocks = CompressElementMap(nullptr, index.data(), rows * cols);
    ASSERT_EQ(blocks[0].row_stride, 1);
    std::vector<float> out(static_cast<size_t>(rows * cols));
    CopyFault fault;
    const void* srcs[] = {src.data()};
    ASSERT_TRUE(CopyBlocks(blocks, srcs, out.data(), DType::kFloat32, true, &fault));
    for (int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(out[i], src[index[i]]) << "element " << i;
    for (int64_t at : {rows + 5, (cols - 1) * rows + rows * 7 / 10, rows * cols - 1}) {
      std::vector<float> bad = src;
      bad[at] = std::nanf("");
      const void* bad_srcs[] = {bad.data()};
      EXPECT_FALSE(CopyBlocks(blocks, bad_srcs, out.data(), DType::kFloat32, true, &fault));
      EXPECT_EQ(fault.index, at);
      std::vector<CopyTask> jobs = {CopyTask{&blocks, bad_srcs, out.data(), DType::kFloat32}};
      std::vector<CopyPiece> pieces;
      SplitTasks(jobs, 1 << 14, &pieces);
      size_t task = 9;
      fault = CopyFault{};
      EXPECT_FALSE(CopyPieces(jobs, pieces.data(), pieces.size(), true, true, &fault, &task, nullptr));
      EXPECT_EQ(fault.index, at);
      EXPECT_EQ(task, 0u);
    }
  }
}

TEST(BlockCopy, ParallelPiecesEqualTheSerialCopy) {
  ThreadPool pool(4);
  // A long contiguous run, a transpose, and a panel layout, each large enough to be split.
  const int64_t n = 600, k = 1000;
  const std::vector<float> src = Random(n * k, 21);
  std::vector<std::vector<int64_t>> maps = {TransposeIndex({n, k}, {1, 0}),
                                            TransposeIndex({n / 8, 8, k}, {0, 2, 1})};
  maps.emplace_back(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < n * k; ++i) maps.back()[i] = i;
  for (const auto& index : maps) {
    std::vector<CopyBlock> blocks = CompressElementMap(nullptr, index.data(), n * k);
    std::vector<CopyBlock> pieces;
    SplitBlocks(blocks, 1 << 16, &pieces);
    int64_t largest = 0;
    for (const CopyBlock& b : blocks) largest = std::max(largest, b.size());
    if (largest > (1 << 16)) EXPECT_GT(pieces.size(), blocks.size());
    for (const CopyBlock& p : pieces) EXPECT_LE(p.size(), std::max<int64_t>(1 << 16, 8 * p.cols));
    int64_t covered = 0;
    for (const CopyBlock& p : pieces) covered += p.size();
    EXPECT_EQ(covered, n * k);
    std::vector<float> serial(static_cast<size_t>(n * k)), parallel(static_cast<size_t>(n * k), -1.0f);
    const void* srcs[] = {src.data()};
    CopyFault fault;
    ASSERT_TRUE(CopyBlocks(blocks, srcs, serial.data(), DType::kFloat32, true, &fault));
    ASSERT_TRUE(CopyBlocksParallel(blocks, srcs, parallel.data(), DType::kFloat32, true, &fault, &pool));
    ASSERT_EQ(serial, parallel);
    for (int64_t i = 0; i < n * k; i += 9973) ASSERT_EQ(parallel[i], src[index[i]]);
  }
  // A NaN deep in the source is found by whichever piece reads it.
  std::vector<float> bad = src;
  bad[n * k - 12345] = std::nanf("");
  std::vector<CopyBlock> blocks = CompressElementMap(nullptr, maps.back().data(), n * k);
  std::vector<float> out(static_cast<size_t>(n * k));
  const void* srcs[] = {bad.data()};
  CopyFault fault;
  EXPECT_FALSE(CopyBlocksParallel(blocks, srcs, out.data(), DType::kFloat32, true, &fault, &pool));
  EXPECT_EQ(fault.index, n * k - 12345);
}

}  // namespace
}  // namespace kaiwu
