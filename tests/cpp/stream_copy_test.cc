// Streaming-store copies against memcpy and the plain transpose, at every
// alignment of the destination, and the pieces a GPU refit copies into its
// staging with them (in chunks, on a pool) against the source, finite check
// included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/stream_copy.h"
#include "core/thread_pool.h"
#include "core/transpose.h"
#include "kaiwu/tensor.h"
#include "runtime/block_copy.h"

namespace kaiwu {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(gen);
  return v;
}

TEST(StreamCopy, EqualsMemcpyAtEveryAlignment) {
  const std::vector<float> src = Random(4096, 1);
  for (size_t offset = 0; offset < 17; ++offset) {
    for (size_t bytes : {size_t{0}, size_t{3}, size_t{63}, size_t{64}, size_t{65}, size_t{127},
                         size_t{1000}, size_t{4096}, size_t{8191}}) {
      SCOPED_TRACE(testing::Message() << "offset " << offset << ", " << bytes << " bytes");
      std::vector<char> want(9000, 7), got(9000, 7);
      std::memcpy(want.data() + offset, src.data(), bytes);
      StreamCopy(got.data() + offset, src.data(), bytes);
      StreamFence();
      ASSERT_EQ(want, got);
    }
  }
}

TEST(StreamCopy, CopyCheckBitsFindsEveryBadPosition) {
  // The copy equals memcpy at every length class (4-vector steps, single vectors, a
  // scalar tail), and one NaN, +Inf or -Inf anywhere in it is reported.
  for (int64_t n : {0, 5, 8, 31, 32, 100, 4099}) {
    SCOPED_TRACE(testing::Message() << n << " elements");
    const std::vector<float> src = Random(n, static_cast<uint32_t>(n + 1));
    std::vector<float> dst(static_cast<size_t>(n) + 1, -7.0f);
    EXPECT_FALSE(CopyCheckBits32(dst.data(), src.data(), n, 0x7f800000u));
    if (n > 0)  // an empty vector's data() may be null, which memcmp must not get
      EXPECT_EQ(0, std::memcmp(dst.data(), src.data(), static_cast<size_t>(n) * sizeof(float)));
    EXPECT_EQ(dst[n], -7.0f);  // nothing written past the end
    const float bad_values[] = {std::nanf(""), INFINITY, -INFINITY};
    for (int64_t at = 0; at < n; at += (n < 64 ? 1 : 37)) {
      std::vector<float> bad = src;
      bad[at] = bad_values[at % 3];
      EXPECT_TRUE(CopyCheckBits32(dst.data(), bad.data(), n, 0x7f800000u)) << "bad at " << at;
      EXPECT_EQ(0, std::memcmp(dst.data(), bad.data(), static_cast<size_t>(n) * sizeof(float)));
    }
  }
  // Through CopyBlocks: a run of several check chunks names the bad element's index.
  const int64_t n = 10000;
  std::vector<float> src = Random(n, 3), out(static_cast<size_t>(n));
  std::vector<CopyBlock> blocks(1);
  blocks[0].cols = n;
  blocks[0].row_stride = n;
  for (int64_t at : {int64_t{0}, int64_t{4100}, n - 1}) {
    std::vector<float> bad = src;
    bad[at] = INFINITY;
    const void* srcs[] = {bad.data()};
    CopyFault fault;
    EXPECT_FALSE(CopyBlocks(blocks, srcs, out.data(), DType::kFloat32, true, &fault));
    EXPECT_EQ(fault.index, at);
  }
}

TEST(StreamCopy, TransposeCheckFindsEveryBadPosition) {
  // Transpose32Check equals Transpose32 (8 x 8 tiles, 8 x 4 tiles, edges) and reports one
  // non-finite value wherever it is; ld wider than the rows read.
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {3, 5}, {16, 16}, {9, 17}, {64, 3}, {31, 64}, {100, 13}}) {
    SCOPED_TRACE(testing::Message() << rows << " x " << cols);
    const int64_t ld = rows + 3;
    const std::vector<float> src = Random(cols * ld, static_cast<uint32_t>(rows * 7 + cols));
    std::vector<float> want(static_cast<size_t>(rows * cols)), got(want.size());
    Transpose32(src.data(), rows, cols, ld, want.data());
    EXPECT_FALSE(Transpose32Check(src.data(), rows, cols, ld, got.data(), 0x7f800000u));
    EXPECT_EQ(got, want);
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> bad = src;
        bad[c * ld + r] = (r + c) % 2 ? INFINITY : std::nanf("");
        ASSERT_TRUE(Transpose32Check(bad.data(), rows, cols, ld, got.data(), 0x7f800000u))
            << "bad at row " << r << ", column " << c;
      }
    std::vector<float> outside = src;  // past the rows read: not looked at
    outside[ld - 1] = std::nanf("");
    EXPECT_FALSE(Transpose32Check(outside.data(), rows, cols, ld, got.data(), 0x7f800000u));
  }
}

TEST(StreamCopy, TransposeEqualsThePlainTranspose) {
  // Panels of 16 and 32 columns (streamed), and columns that are not (the plain path).
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {3136, 16}, {7, 16}, {23, 32}, {100, 48}, {64, 8}, {9, 17}}) {
    SCOPED_TRACE(testing::Message() << rows << " x " << cols);
    const int64_t ld = rows + 5;
    const std::vector<float> src = Random(ld * cols, static_cast<uint32_t>(rows + cols));
    std::vector<float> want(static_cast<size_t>(rows * cols));
    Transpose32(src.data(), rows, cols, ld, want.data());
    for (int64_t shift : {0, 1}) {  // 64-byte aligned, and not
      float* base = static_cast<float*>(AlignedAlloc(static_cast<size_t>(rows * cols + 16) * 4));
      Transpose32Stream(src.data(), rows, cols, ld, base + shift);
      StreamFence();
      for (int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(base[shift + i], want[i]) << i;
      AlignedFree(base);
    }
  }
}

TEST(StreamCopy, StagedPiecesInChunksEqualTheSource) {
  // A prepacked GEMM weight (panels of 16 columns) and a contiguous weight,
  // cut into pieces and copied in two chunks as a GPU refit stages them,
  // serially and on a pool.
  const int64_t n = 512, k = 1030;
  const std::vector<float> w = Random(n * k, 3), v = Random(n * k, 4);
  std::vector<int64_t> panels = TransposeIndex({n / 16, 16, k}, {0, 2, 1});
  std::vector<int64_t> flat(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < n * k; ++i) flat[i] = i;
  const std::vector<CopyBlock> panel_blocks = CompressElementMap(nullptr, panels.data(), n * k);
  const std::vector<CopyBlock> flat_blocks = CompressElementMap(nullptr, flat.data(), n * k);
  ThreadPool one(1), four(4);
  for (ThreadPool* pool : {&one, &four}) {
    float* a = static_cast<float*>(AlignedAlloc(static_cast<size_t>(n * k) * 4));
    float* b = static_cast<float*>(AlignedAlloc(static_cast<size_t>(n * k + 1) * 4));
    const void* wsrc[] = {w.data()};
    const void* vsrc[] = {v.data()};
    std::vector<CopyTask> jobs = {CopyTask{&panel_blocks, wsrc, a, DType::kFloat32},
                                  CopyTask{&flat_blocks, vsrc, b + 1, DType::kFloat32}};
    CopyFault fault;
    size_t job = 0;
    std::vector<CopyPiece> pieces;
    auto copy = [&](bool check) {  // without the check, panels take the streamed transpose
      SplitTasks(jobs, 1 << 14, &pieces);
      const size_t half = pieces.size() / 2;
      return CopyPieces(jobs, pieces.data(), half, check, true, &fault, &job, pool) &&
             CopyPieces(jobs, pieces.data() + half, pieces.size() - half, check, true, &fault,
                        &job, pool);
    };
    for (bool check : {false, true}) {
      std::fill(a, a + n * k, 0.0f);
      std::fill(b, b + n * k + 1, 0.0f);
      ASSERT_TRUE(copy(check));
      for (int64_t i = 0; i < n * k; ++i) {
        ASSERT_EQ(a[i], w[panels[i]]) << i;
        ASSERT_EQ(b[1 + i], v[i]) << i;
      }
    }
    // A NaN in either source is named, streamed or not.
    std::vector<float> bad = v;
    bad[n * k - 77] = std::nanf("");
    const void* bad_src[] = {bad.data()};
    jobs[1].srcs = bad_src;
    ASSERT_FALSE(copy(true));
    EXPECT_EQ(job, 1u);
    EXPECT_EQ(fault.index, n * k - 77);
    std::vector<float> bad_w = w;
    bad_w[16 * k + 5] = INFINITY;
    const void* bad_wsrc[] = {bad_w.data()};
    jobs[1].srcs = vsrc;
    jobs[0].srcs = bad_wsrc;
    ASSERT_FALSE(copy(true));
    EXPECT_EQ(job, 0u);
    EXPECT_EQ(fault.index, 16 * k + 5);
    AlignedFree(a);
    AlignedFree(b);
  }
}

}  // namespace
}  // namespace kaiwu
