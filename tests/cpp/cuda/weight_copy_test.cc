// The refit's device copy kernel (backends/cuda/weight_copy.cu): jobs in the
// launch's parameters (LaunchCopyJobsByValue, each size of its tables) and
// from a job table in device memory (LaunchCopyJobs) against a host reference
// of the same element map, bit for bit, on random data at odd sizes, strided
// and contiguous, 1/2/4/8-byte elements; the fused NaN/Inf check reports the
// first bad element by (tag, index) on both paths.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "backends/cuda/weight_copy.h"
#include "cuda_harness.h"

namespace kaiwu {
namespace testing {
namespace {

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes ? bytes : 1), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
};

struct Case {
  std::vector<cuda::CopyJob> jobs;
  std::vector<std::vector<uint8_t>> src;   // host copy of each job's source
  std::vector<std::vector<uint8_t>> want;  // each job's expected destination
  std::vector<size_t> dst_offset;          // into one destination buffer
  size_t dst_bytes = 0;
};

// `n` jobs of random shapes: transposes (col_stride > 1), row-strided blocks
// and contiguous runs, at sizes around kCopyChunkByValue's multiples.
Case MakeCase(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  Case c;
  const int sizes[] = {1, 2, 4, 8};
  for (int j = 0; j < n; ++j) {
    cuda::CopyJob job{};
    const int es = sizes[rng() % 4];
    const int kind = static_cast<int>(rng() % 3);
    int64_t rows = 1 + rng() % 9, cols = 1 + rng() % 700;
    if (kind == 2) {  // contiguous, sometimes a few chunks long
      rows = 1;
      cols = (rng() % 4 == 0) ? 2 * cuda::kCopyChunkByValue + 1 + rng() % 5000 : 1 + rng() % 3000;
    }
    int64_t row_stride = cols, col_stride = 1, src_elems = rows * cols;
    int64_t src_offset = rng() % 5;
    if (kind == 0) {  // the transpose of a rows x cols matrix stored cols x rows
      col_stride = rows;
      row_stride = 1;
      src_elems = rows * cols;
    } else if (kind == 1) {  // every other row-length of a wider matrix
      row_stride = cols + 1 + rng() % 7;
      src_elems = rows * row_stride;
    }
    src_elems += src_offset;
    std::vector<uint8_t> src(static_cast<size_t>(src_elems * es));
    for (auto& b : src) b = static_cast<uint8_t>(rng());
    std::vector<uint8_t> want(static_cast<size_t>(rows * cols * es));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k)
        std::memcpy(&want[(r * cols + k) * es], &src[(src_offset + r * row_stride + k * col_stride) * es], es);
    job.src_offset = src_offset;
    job.rows = rows;
    job.cols = cols;
    job.row_stride = row_stride;
    job.col_stride = col_stride;
    job.elem_size = es;
    job.tag = j;
    c.dst_offset.push_back(c.dst_bytes);
    c.dst_bytes += (want.size() + 255) / 256 * 256;
    c.jobs.push_back(job);
    c.src.push_back(std::move(src));
    c.want.push_back(std::move(want));
  }
  return c;
}

// Runs the case through one path; returns the destination and the fault word.
std::vector<uint8_t> CopyOnDevice(Case& c, bool by_value, unsigned long long* fault_out) {
  std::vector<std::unique_ptr<DeviceBuffer>> srcs;
  DeviceBuffer dst(c.dst_bytes), fault(sizeof(unsigned long long));
  EXPECT_EQ(cudaMemset(dst.p, 0, c.dst_bytes), cudaSuccess);
  EXPECT_EQ(cudaMemset(fault.p, 0xff, sizeof(unsigned long long)), cudaSuccess);
  std::vector<cuda::CopyJob> jobs = c.jobs;
  std::vector<int64_t> first(jobs.size() + 1);
  const int64_t chunk = by_value ? cuda::kCopyChunkByValue : cuda::kCopyChunk;
  int64_t blocks = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    srcs.push_back(std::make_unique<DeviceBuffer>(c.src[j].size()));
    EXPECT_EQ(cudaMemcpy(srcs.back()->p, c.src[j].data(), c.src[j].size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    jobs[j].src = srcs.back()->p;
    jobs[j].dst = static_cast<char*>(dst.p) + c.dst_offset[j];
    first[j] = blocks;
    blocks += (jobs[j].rows * jobs[j].cols + chunk - 1) / chunk;
  }
  first[jobs.size()] = blocks;
  const int n = static_cast<int>(jobs.size());
  if (by_value) {
    cuda::LaunchCopyJobsByValue(jobs.data(), first.data(), n, blocks,
                                static_cast<unsigned long long*>(fault.p), nullptr);
  } else {
    DeviceBuffer table(jobs.size() * sizeof(cuda::CopyJob)), firsts(first.size() * sizeof(int64_t));
    EXPECT_EQ(cudaMemcpy(table.p, jobs.data(), jobs.size() * sizeof(cuda::CopyJob), cudaMemcpyHostToDevice),
              cudaSuccess);
    EXPECT_EQ(cudaMemcpy(firsts.p, first.data(), first.size() * sizeof(int64_t), cudaMemcpyHostToDevice),
              cudaSuccess);
    cuda::LaunchCopyJobs(static_cast<const cuda::CopyJob*>(table.p), static_cast<const int64_t*>(firsts.p),
                         n, blocks, static_cast<unsigned long long*>(fault.p), nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> out(c.dst_bytes);
  EXPECT_EQ(cudaMemcpy(out.data(), dst.p, c.dst_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(fault_out, fault.p, sizeof(unsigned long long), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

class CudaWeightCopyJobs : public ::testing::TestWithParam<int> {};

TEST_P(CudaWeightCopyJobs, BothPathsCopyEveryElement) {
  KAIWU_REQUIRE_CUDA();
  const int n = GetParam();
  Case c = MakeCase(n, 1000u + static_cast<uint32_t>(n));
  for (bool by_value : {true, false}) {
    if (by_value && n > cuda::kMaxParamJobs) continue;
    unsigned long long fault = 0;
    std::vector<uint8_t> out = CopyOnDevice(c, by_value, &fault);
    EXPECT_EQ(fault, ~0ull) << "no job checks, so nothing may be reported";
    for (int j = 0; j < n; ++j)
      ASSERT_EQ(std::memcmp(out.data() + c.dst_offset[j], c.want[j].data(), c.want[j].size()), 0)
          << "job " << j << " of " << n << (by_value ? " (by value)" : " (table)") << ": "
          << c.jobs[j].rows << "x" << c.jobs[j].cols << " elem " << c.jobs[j].elem_size << " strides "
          << c.jobs[j].row_stride << "," << c.jobs[j].col_stride;
  }
}

// 1 and 24 (the smallest table), 25 and 96, 97 and kMaxParamJobs, one more (table only).
INSTANTIATE_TEST_SUITE_P(CudaJobCounts, CudaWeightCopyJobs,
                         ::testing::Values(1, 24, 25, 96, 97, cuda::kMaxParamJobs, cuda::kMaxParamJobs + 1));

TEST(CudaWeightCopy, CheckFindsTheFirstNonFiniteElementOnBothPaths) {
  KAIWU_REQUIRE_CUDA();
  for (bool by_value : {true, false}) {
    Case c = MakeCase(40, 77);
    // Float32 jobs with the check on; two bad elements in job 30, one in job 33.
    std::mt19937 rng(5);
    for (int j = 0; j < 40; ++j) {
      cuda::CopyJob& job = c.jobs[j];
      job.elem_size = 4;
      job.rows = 1;
      job.col_stride = 1;
      job.cols = 5000 + j;
      job.row_stride = job.cols;
      job.check = 4;
      c.src[j].resize(static_cast<size_t>((job.src_offset + job.cols) * 4));
      for (int64_t e = 0; e < job.src_offset + job.cols; ++e) {
        const float v = std::uniform_real_distribution<float>(-2.f, 2.f)(rng);
        std::memcpy(&c.src[j][e * 4], &v, 4);
      }
    }
    auto put = [&](int j, int64_t e, float v) { std::memcpy(&c.src[j][(c.jobs[j].src_offset + e) * 4], &v, 4); };
    put(33, 17, std::numeric_limits<float>::infinity());
    put(30, 4999, std::numeric_limits<float>::quiet_NaN());
    put(30, 4100, -std::numeric_limits<float>::infinity());
    c.dst_bytes = 0;
    c.dst_offset.clear();
    for (int j = 0; j < 40; ++j) {
      c.dst_offset.push_back(c.dst_bytes);
      c.dst_bytes += (static_cast<size_t>(c.jobs[j].cols) * 4 + 255) / 256 * 256;
    }
    unsigned long long fault = 0;
    CopyOnDevice(c, by_value, &fault);
    ASSERT_NE(fault, ~0ull) << (by_value ? "by value" : "table");
    EXPECT_EQ(static_cast<int>(fault >> 40), 30) << (by_value ? "by value" : "table");
    EXPECT_EQ(static_cast<int64_t>(fault & ((1ull << 40) - 1)), c.jobs[30].src_offset + 4100)
        << (by_value ? "by value" : "table");
  }
}

}  // namespace
}  // namespace testing
}  // namespace kaiwu
