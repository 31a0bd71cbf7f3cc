// BatchAssembly on random requests: feed and state rows gathered slice by
// slice (done rows zeroed, padding zero), and slice outputs scattered back to
// each request and its actor's next state, whole or across slices.
#include "runtime/server_batch.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <tuple>

#include "core/thread_pool.h"
#include "server_test_util.h"

namespace kaiwu {
namespace {

IOInfo IO(const std::string& name, DType dtype, Shape dims, std::vector<std::string> symbols) {
  IOInfo io;
  io.name = name;
  io.dtype = dtype;
  io.has_shape = true;
  io.dims = std::move(dims);
  io.symbols = std::move(symbols);
  return io;
}

// Feeds obs [B, 3] f32 and act [B] i64; states h0 [2, B, 4] f32 (batch on
// axis 1) and c0 [B, 5] i32. Outputs y [B, 5], hn, g [7] (no batch), cn.
ServerLayout Layout() {
  ServerOptions o;
  o.state = {{"h0", "hn"}, {"c0", "cn"}};
  return ServerLayout::Build(
      {IO("obs", DType::kFloat32, {-1, 3}, {"B", ""}),
       IO("h0", DType::kFloat32, {2, -1, 4}, {"", "B", ""}), IO("act", DType::kInt64, {-1}, {"B"}),
       IO("c0", DType::kInt32, {-1, 5}, {"B", ""})},
      {IO("y", DType::kFloat32, {-1, 5}, {"B", ""}),
       IO("hn", DType::kFloat32, {2, -1, 4}, {"", "B", ""}), IO("g", DType::kFloat32, {7}, {""}),
       IO("cn", DType::kInt32, {-1, 5}, {"B", ""})},
      o);
}
const std::vector<int> kAxes = {0, 1, -1, 0};
constexpr size_t kFeedRowBytes[2] = {12, 8};

// Requests of 13 rows in all (so that every slicing below pads), with random
// feeds and actor states; two with done flags.
constexpr int64_t kRows[6] = {2, 3, 3, 1, 2, 2};
struct Group {
  std::mt19937 rng{17};
  std::vector<std::vector<uint8_t>> data;  // feed bytes, two per request
  Requests batch;
  RequestStates states;
  int64_t rows = 0;

  Group(const ServerLayout& l, int n) {
    data.reserve(2 * n);
    for (int j = 0; j < n; ++j) {
      auto r = std::make_shared<ServerRequest>();
      r->rows = kRows[j % 6];
      data.push_back(testing::RandomBytes(r->rows * kFeedRowBytes[0], &rng));
      r->feeds.push_back(TensorView{DType::kFloat32, {r->rows, 3}, data.back().data()});
      data.push_back(testing::RandomBytes(r->rows * kFeedRowBytes[1], &rng));
      r->feeds.push_back(TensorView{DType::kInt64, {r->rows}, data.back().data()});
      if (j == 1) r->done = {1};
      if (j == 3) {
        for (int64_t i = 0; i < r->rows; ++i) r->done.push_back(i % 2 == 0);
      }
      auto st = ZeroState(l.state, r->rows);
      for (auto& t : *st) {
        auto b = testing::RandomBytes(t.bytes(), &rng);
        std::memcpy(t.data(), b.data(), b.size());
      }
      rows += r->rows;
      batch.push_back(r);
      states.push_back(st);
    }
  }
};

const uint8_t* Bytes(const TensorView& v) { return static_cast<const uint8_t*>(v.data); }
const uint8_t* Bytes(const Tensor& t) { return static_cast<const uint8_t*>(t.data()); }
bool Zeros(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i]) return false;
  return true;
}

// (slices asked for, pad)
class ServerBatch : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(ServerBatch, GatherLaysRowsOutSliceBySlice) {
  const auto [k, pad] = GetParam();
  const ServerLayout l = Layout();
  Group g(l, 6);
  // What the actor states hold before the step, done rows zeroed.
  std::vector<std::vector<Tensor>> before;
  for (size_t j = 0; j < g.batch.size(); ++j) {
    before.emplace_back();
    for (const Tensor& t : *g.states[j]) {
      before.back().emplace_back(t.dtype(), t.shape());
      std::memcpy(before.back().back().data(), t.data(), t.bytes());
    }
    const ServerRequest& r = *g.batch[j];
    for (size_t s = 0; s < l.state.size(); ++s)
      for (int64_t row = 0; row < r.rows; ++row)
        if (!r.done.empty() && r.done[r.done.size() == 1 ? 0 : row])
          for (int64_t o = 0; o < l.state[s].outer; ++o)
            std::memset(static_cast<uint8_t*>(before[j][s].data()) +
                            (o * r.rows + row) * l.state[s].inner_bytes(),
                        0, l.state[s].inner_bytes());
  }
  const SliceLayout sl = SliceLayout::Plan(g.rows, k, 64, pad ? Padding::kCoarse : Padding::kNone);
  BatchScratch scratch;
  for (size_t i = 0; i < 4; ++i) std::memset(scratch.Get(i, 4096), 0xAB, 4096);  // stale bytes
  BatchAssembly as(l, sl);
  as.Gather(g.batch, g.states, 0, g.batch.size(), &scratch);
  for (size_t j = 0; j < g.batch.size(); ++j)  // done rows are zeroed in the actor's state too
    for (size_t s = 0; s < l.state.size(); ++s)
      EXPECT_EQ(std::memcmp(Bytes((*g.states[j])[s]), Bytes(before[j][s]), before[j][s].bytes()),
                0);

  std::vector<std::pair<size_t, int64_t>> owner;  // global row -> (request, row)
  for (size_t j = 0; j < g.batch.size(); ++j)
    for (int64_t row = 0; row < g.batch[j]->rows; ++row) owner.emplace_back(j, row);
  for (int64_t s = 0; s < sl.count; ++s) {
    const int64_t n_s = sl.Rows(s);
    const auto in = as.SliceInputs(g.batch[0]->feeds, s);
    ASSERT_EQ(in.size(), 4u);
    EXPECT_EQ(in[0].shape, Shape({n_s, 3}));
    EXPECT_EQ(in[1].shape, Shape({2, n_s, 4}));
    EXPECT_EQ(in[2].shape, Shape({n_s}));
    EXPECT_EQ(in[3].shape, Shape({n_s, 5}));
    EXPECT_EQ(in[2].dtype, DType::kInt64);
    EXPECT_EQ(in[3].dtype, DType::kInt32);
    for (int64_t i = 0; i < n_s; ++i) {
      const int64_t row = s * sl.size + i;
      const bool real = row < g.rows;
      for (int f = 0; f < 2; ++f) {
        const uint8_t* got = Bytes(in[f == 0 ? 0 : 2]) + i * kFeedRowBytes[f];
        if (!real) {
          EXPECT_TRUE(Zeros(got, kFeedRowBytes[f])) << "pad row " << row;
          continue;
        }
        const auto [j, r] = owner[row];
        EXPECT_EQ(
            std::memcmp(got, Bytes(g.batch[j]->feeds[f]) + r * kFeedRowBytes[f], kFeedRowBytes[f]),
            0)
            << "feed " << f << " row " << row;
      }
      for (size_t st = 0; st < l.state.size(); ++st) {
        const StateSpec& spec = l.state[st];
        const size_t ib = spec.inner_bytes();
        for (int64_t o = 0; o < spec.outer; ++o) {
          const uint8_t* got = Bytes(in[spec.in_index]) + (o * n_s + i) * ib;
          if (!real) {
            EXPECT_TRUE(Zeros(got, ib)) << "pad state row " << row;
            continue;
          }
          const auto [j, r] = owner[row];
          const uint8_t* want = Bytes(before[j][st]) + (o * g.batch[j]->rows + r) * ib;
          EXPECT_EQ(std::memcmp(got, want, ib), 0) << "state " << st << " row " << row;
        }
      }
    }
  }
}

TEST_P(ServerBatch, ScatterHandsEachRequestItsRowsAndNextState) {
  const auto [k, pad] = GetParam();
  const ServerLayout l = Layout();
  Group g(l, 6);
  const SliceLayout sl = SliceLayout::Plan(g.rows, k, 64, pad ? Padding::kCoarse : Padding::kNone);
  // Slice outputs: y [n_s, 5], hn [2, n_s, 4], g [7], cn [n_s, 5], random.
  std::vector<RunResult> res(sl.count);
  for (int64_t s = 0; s < sl.count; ++s) {
    const int64_t n_s = sl.Rows(s);
    auto keep = std::make_shared<std::vector<Tensor>>();
    keep->emplace_back(DType::kFloat32, Shape{n_s, 5});
    keep->emplace_back(DType::kFloat32, Shape{2, n_s, 4});
    keep->emplace_back(DType::kFloat32, Shape{7});
    keep->emplace_back(DType::kInt32, Shape{n_s, 5});
    for (Tensor& t : *keep) {
      auto b = testing::RandomBytes(t.bytes(), &g.rng);
      std::memcpy(t.data(), b.data(), b.size());
      res[s].outputs.push_back(t.view());
    }
    res[s].owner = keep;
  }
  BatchAssembly as(l, sl);
  as.Scatter(kAxes, res, g.batch, g.states, 0, g.batch.size());

  int64_t a = 0;
  for (size_t j = 0; j < g.batch.size(); ++j) {
    const ServerRequest& r = *g.batch[j];
    const int64_t n = r.rows;
    ASSERT_EQ(r.outputs.size(), 4u);
    EXPECT_EQ(r.outputs[0].shape, Shape({n, 5}));
    EXPECT_EQ(r.outputs[1].shape, Shape({2, n, 4}));
    EXPECT_EQ(r.outputs[2].shape, Shape({7}));
    EXPECT_EQ(r.outputs[3].shape, Shape({n, 5}));
    const int64_t s_first = a / sl.size, s_last = (a + n - 1) / sl.size;
    EXPECT_EQ(r.outputs[2].data, res[s_first].outputs[2].data);  // whole, shared
    // One slice and one outer index: a view into the run's output, else a copy.
    EXPECT_EQ(r.owners[0] == res[s_first].owner, s_first == s_last);
    EXPECT_NE(r.owners[1], res[s_first].owner);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = a + i, s = row / sl.size, local = row - s * sl.size;
      const int64_t n_s = sl.Rows(s);
      const auto& out = res[s].outputs;
      EXPECT_EQ(std::memcmp(Bytes(r.outputs[0]) + i * 20, Bytes(out[0]) + local * 20, 20), 0);
      EXPECT_EQ(std::memcmp(Bytes(r.outputs[3]) + i * 20, Bytes(out[3]) + local * 20, 20), 0);
      EXPECT_EQ(std::memcmp(Bytes((*g.states[j])[1]) + i * 20, Bytes(out[3]) + local * 20, 20), 0);
      for (int64_t o = 0; o < 2; ++o) {
        const uint8_t* want = Bytes(out[1]) + (o * n_s + local) * 16;
        EXPECT_EQ(std::memcmp(Bytes(r.outputs[1]) + (o * n + i) * 16, want, 16), 0);
        EXPECT_EQ(std::memcmp(Bytes((*g.states[j])[0]) + (o * n + i) * 16, want, 16), 0);
      }
    }
    a += n;
  }
}

INSTANTIATE_TEST_SUITE_P(SlicesAndPadding, ServerBatch,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5), ::testing::Bool()));

TEST(ServerBatchGroup, OneRequestOfABatchRunsAlone) {
  // The isolation path: requests [2, 3) only, as after a failed batch.
  const ServerLayout l = Layout();
  Group g(l, 5);
  const int64_t n = g.batch[2]->rows;  // 3: padded to 4
  const SliceLayout sl = SliceLayout::Plan(n, 1, 64, Padding::kCoarse);
  BatchScratch scratch;
  for (size_t i = 0; i < 4; ++i) std::memset(scratch.Get(i, 4096), 0xAB, 4096);  // stale bytes
  BatchAssembly as(l, sl);
  as.Gather(g.batch, g.states, 2, 3, &scratch);
  const auto in = as.SliceInputs(g.batch[2]->feeds, 0);
  EXPECT_EQ(in[0].shape, Shape({sl.size, 3}));
  EXPECT_EQ(std::memcmp(in[0].data, g.batch[2]->feeds[0].data, n * 12), 0);
  EXPECT_EQ(std::memcmp(in[2].data, g.batch[2]->feeds[1].data, n * 8), 0);
  EXPECT_TRUE(Zeros(Bytes(in[0]) + n * 12, (sl.size - n) * 12));

  // An identity "model": outputs obs, h0 (as hn), act, c0 (as cn).
  std::vector<RunResult> res(1);
  res[0].outputs = in;
  as.Scatter({0, 1, 0, 0}, res, g.batch, g.states, 2, 3);
  const ServerRequest& r = *g.batch[2];
  EXPECT_EQ(r.outputs[0].shape, Shape({n, 3}));
  EXPECT_EQ(std::memcmp(r.outputs[0].data, r.feeds[0].data, n * 12), 0);
  EXPECT_EQ(r.outputs[2].shape, Shape({n}));
  EXPECT_EQ(std::memcmp(r.outputs[2].data, r.feeds[1].data, n * 8), 0);
  EXPECT_EQ(r.outputs[1].shape, Shape({2, n, 4}));
  EXPECT_EQ(std::memcmp(r.outputs[1].data, (*g.states[2])[0].data(), n * 32), 0);
  EXPECT_TRUE(g.batch[1]->outputs.empty());  // others untouched
  EXPECT_TRUE(g.batch[3]->outputs.empty());
}

TEST(ServerBatchScratch, PaddingIsZeroedOnlyWhereEarlierBatchesWrote) {
  size_t allocated = 0;
  BatchScratch scratch([&](size_t n) {
    allocated += n;
    return std::shared_ptr<void>(new char[n], [](void* p) { delete[] static_cast<char*>(p); });
  });
  std::mt19937 rng(5);
  auto fill = [&](size_t used, size_t bytes) {
    char* p = static_cast<char*>(scratch.GetPadded(0, used, bytes));
    auto b = testing::RandomBytes(used, &rng);
    std::memcpy(p, b.data(), used);
    EXPECT_TRUE(Zeros(reinterpret_cast<uint8_t*>(p) + used, bytes - used))
        << "used " << used << " of " << bytes;
  };
  // Zeroed: [used, min(end of what earlier calls may have written, bytes)).
  fill(1000, 1200);  // a new buffer starts zero: nothing to clear
  EXPECT_GE(allocated, 1200u);
  EXPECT_EQ(scratch.zeroed_bytes(), 0u);
  fill(900, 1200);  // [900, 1000) only: past 1000 it is still zero
  EXPECT_EQ(scratch.zeroed_bytes(), 100u);
  fill(950, 1200);  // nothing: past 950 it is zero
  EXPECT_EQ(scratch.zeroed_bytes(), 100u);
  fill(600, 800);  // [600, 800); [800, 950) stays written
  EXPECT_EQ(scratch.zeroed_bytes(), 300u);
  fill(100, 1200);  // [100, 950)
  EXPECT_EQ(scratch.zeroed_bytes(), 1150u);
  const size_t before = allocated;
  std::memset(scratch.Get(0, 1100), 0x5A, 1100);  // a plain Get may write all of it
  fill(50, 1100);
  EXPECT_EQ(scratch.zeroed_bytes(), 1150u + 1050u);
  EXPECT_EQ(allocated, before);  // headroom: no new buffer
}

TEST(ServerBatchGather, ParallelCopyEqualsSerialCopy) {
  // Feeds large enough to be copied on several threads (kParallelBytes), at
  // odd row sizes and counts, padded; the same bytes as one thread copies.
  ServerOptions o;
  const int64_t kObs = 37 * 41;  // floats a row: 6068 bytes
  const ServerLayout l = ServerLayout::Build(
      {IO("obs", DType::kFloat32, {-1, kObs}, {"B", ""}), IO("id", DType::kInt32, {-1}, {"B"})},
      {IO("y", DType::kFloat32, {-1, 1}, {"B", ""})}, o);
  std::mt19937 rng(11);
  std::vector<std::vector<uint8_t>> data;
  Requests batch;
  RequestStates states;
  int64_t rows = 0;
  for (int64_t n : {1, 7, 64, 13, 99, 3, 201}) {
    auto r = std::make_shared<ServerRequest>();
    r->rows = n;
    data.push_back(testing::RandomBytes(n * kObs * 4, &rng));
    r->feeds.push_back(TensorView{DType::kFloat32, {n, kObs}, data.back().data()});
    data.push_back(testing::RandomBytes(n * 4, &rng));
    r->feeds.push_back(TensorView{DType::kInt32, {n}, data.back().data()});
    batch.push_back(r);
    states.push_back(nullptr);
    rows += n;
  }
  const SliceLayout sl = SliceLayout::Plan(rows, 1, 1024, Padding::kCoarse);
  ASSERT_GT(sl.total(), rows);  // 388 rows run as 512
  ThreadPool pool(3);
  BatchScratch serial_scratch, parallel_scratch;
  BatchAssembly serial(l, sl);
  const size_t bytes = rows * (kObs * 4 + 4);
  EXPECT_EQ(serial.Gather(batch, states, 0, batch.size(), &serial_scratch), bytes);
  EXPECT_FALSE(serial.parallel());
  // Requests [2, end) first (380 rows, padded to 384), then all of them (the
  // buffer holds stale rows past 380 then).
  BatchAssembly part(l, SliceLayout::Plan(rows - 8, 1, 1024, Padding::kCoarse));
  EXPECT_EQ(part.Gather(batch, states, 2, batch.size(), &parallel_scratch, &pool),
            bytes - 8 * (kObs * 4 + 4));
  EXPECT_TRUE(part.parallel());
  BatchAssembly again(l, sl);
  EXPECT_EQ(again.Gather(batch, states, 0, batch.size(), &parallel_scratch, &pool), bytes);
  EXPECT_TRUE(again.parallel());
  const auto a = serial.SliceInputs(batch[0]->feeds, 0), b = again.SliceInputs(batch[0]->feeds, 0);
  for (int f = 0; f < 2; ++f) {
    ASSERT_EQ(a[f].shape, b[f].shape);
    EXPECT_EQ(std::memcmp(a[f].data, b[f].data, a[f].bytes()), 0) << "feed " << f;
    const size_t row_bytes = f == 0 ? kObs * 4 : 4;
    EXPECT_TRUE(Zeros(Bytes(b[f]) + rows * row_bytes, (sl.total() - rows) * row_bytes));
  }
  // Below kParallelBytes the worker copies alone.
  BatchAssembly small(l, SliceLayout::Plan(8, 1, 1024, Padding::kCoarse));
  small.Gather(batch, states, 1, 2, &parallel_scratch, &pool);
  EXPECT_FALSE(small.parallel());
}

}  // namespace
}  // namespace kaiwu
