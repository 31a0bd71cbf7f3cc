// ServerLayout on hand-made model I/O: feeds vs state inputs, each state's
// batch axis, request checks, shape probes and output batch axes.
#include "runtime/server_layout.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "server_test_util.h"

namespace kaiwu {
namespace {

using testing::ExpectErrorContaining;

IOInfo IO(const std::string& name, DType dtype, Shape dims, std::vector<std::string> symbols) {
  IOInfo io;
  io.name = name;
  io.dtype = dtype;
  io.has_shape = true;
  io.dims = std::move(dims);
  io.symbols = std::move(symbols);
  return io;
}

// obs [B, 3] f32, h0 [2, B, 4] f32, mask [B, 2] i64; y [B, 5], hn [2, B, 4].
std::vector<IOInfo> Inputs() {
  return {IO("obs", DType::kFloat32, {-1, 3}, {"B", ""}),
          IO("h0", DType::kFloat32, {2, -1, 4}, {"", "B", ""}),
          IO("mask", DType::kInt64, {-1, 2}, {"B", ""})};
}
std::vector<IOInfo> Outputs() {
  return {IO("y", DType::kFloat32, {-1, 5}, {"B", ""}),
          IO("hn", DType::kFloat32, {2, -1, 4}, {"", "B", ""})};
}
ServerOptions StateOptions() {
  ServerOptions o;
  o.state = {{"h0", "hn"}};
  return o;
}

TEST(ServerLayout, SplitsFeedsFromStateAndFindsTheBatchAxisBySymbol) {
  const ServerLayout l = ServerLayout::Build(Inputs(), Outputs(), StateOptions());
  EXPECT_EQ(l.num_inputs, 3u);
  ASSERT_EQ(l.feed_inputs.size(), 2u);
  EXPECT_EQ(l.feed_inputs[0].name, "obs");
  EXPECT_EQ(l.feed_inputs[1].name, "mask");
  EXPECT_EQ(l.feed_index, (std::vector<int>{0, 2}));
  ASSERT_EQ(l.state.size(), 1u);
  const StateSpec& s = l.state[0];
  EXPECT_EQ(s.in_index, 1);
  EXPECT_EQ(s.out_index, 1);
  EXPECT_EQ(s.in_axis, 1);
  EXPECT_EQ(s.out_axis, 1);
  EXPECT_EQ(s.per_row, Shape({2, 4}));
  EXPECT_EQ(s.outer, 2);
  EXPECT_EQ(s.inner, 4);
  EXPECT_EQ(s.inner_bytes(), 16u);
  EXPECT_EQ(s.AtRows(7), Shape({2, 7, 4}));
  EXPECT_EQ(l.out_state, (std::vector<int>{-1, 0}));
  EXPECT_TRUE(l.FixedRowShapes());
}

TEST(ServerLayout, StateBatchAxisFromOptionsElseZero) {
  auto ins = Inputs(), outs = Outputs();
  ins[1].symbols = {"", "", ""};  // no symbol to follow: axis 0
  ins[1].dims = {-1, 2, 4};
  outs[1].dims = {-1, 2, 4};
  ServerLayout l = ServerLayout::Build(ins, outs, StateOptions());
  EXPECT_EQ(l.state[0].in_axis, 0);
  EXPECT_EQ(l.state[0].outer, 1);
  EXPECT_EQ(l.state[0].inner, 8);
  ServerOptions o = StateOptions();
  ins[1].dims = {2, 4, -1};
  o.state_batch_axis = {{"h0", -1}};  // counted from the end
  l = ServerLayout::Build(ins, outs, o);
  EXPECT_EQ(l.state[0].in_axis, 2);
  EXPECT_EQ(l.state[0].outer, 8);
  EXPECT_EQ(l.state[0].inner, 1);
  EXPECT_EQ(l.state[0].per_row, Shape({2, 4}));
}

TEST(ServerLayout, BuildRefusesBadStateOptions) {
  auto build = [](std::vector<IOInfo> ins, std::vector<IOInfo> outs, ServerOptions o) {
    return [=] { ServerLayout::Build(ins, outs, o); };
  };
  const auto ins = Inputs(), outs = Outputs();
  ServerOptions o;
  o.state = {{"c0", "hn"}};
  ExpectErrorContaining(build(ins, outs, o), StatusCode::kInput,
                        "state: 'c0' is not a model input");
  o.state = {{"h0", "cn"}};
  ExpectErrorContaining(build(ins, outs, o), StatusCode::kInput,
                        "state: 'cn' is not a model output");
  o.state = {{"h0", "hn"}, {"h0", "y"}};
  ExpectErrorContaining(build(ins, outs, o), StatusCode::kInput, "state: 'h0' given twice");
  o = StateOptions();
  o.state_batch_axis = {{"obs", 0}};
  ExpectErrorContaining(build(ins, outs, o), StatusCode::kInput,
                        "state_batch_axis: 'obs' is not a state input");
  o.state_batch_axis = {{"h0", 3}};
  ExpectErrorContaining(build(ins, outs, o), StatusCode::kInput,
                        "state_batch_axis for 'h0' is out of range for rank 3");
  o = StateOptions();
  o.state = {{"obs", "y"}, {"h0", "hn"}, {"mask", "hn"}};
  ExpectErrorContaining(build(ins, outs, o), StatusCode::kInput,
                        "the model needs at least one input that is not recurrent state");
  auto bad = outs;
  bad[1].dtype = DType::kFloat64;
  ExpectErrorContaining(build(ins, bad, StateOptions()), StatusCode::kInput,
                        "state 'h0' and output 'hn' have different dtypes");
  auto unfixed = ins;
  unfixed[1].dims = {-1, -1, 4};
  ExpectErrorContaining(build(unfixed, outs, StateOptions()), StatusCode::kInput,
                        "state input 'h0': dimension 0 is not fixed; only the batch axis (1) may "
                        "vary");
  auto shapeless = ins;
  shapeless[1].has_shape = false;
  ExpectErrorContaining(build(shapeless, outs, StateOptions()), StatusCode::kInput,
                        "state input 'h0' has no declared shape");
  auto scalar = ins;
  scalar[1].dims = {};
  scalar[1].symbols = {};
  ExpectErrorContaining(build(scalar, outs, StateOptions()), StatusCode::kInput,
                        "state input 'h0' is a scalar");
}

TEST(ServerLayout, CheckFeedsNamesTheBadInput) {
  const ServerLayout l = ServerLayout::Build(Inputs(), Outputs(), StateOptions());
  ServerRequest r;
  r.feeds = {TensorView{DType::kFloat32, {3, 3}, nullptr},
             TensorView{DType::kInt64, {3, 2}, nullptr}};
  EXPECT_EQ(l.CheckFeeds(r, 8), 3);
  r.done = {1, 0, 1};
  EXPECT_EQ(l.CheckFeeds(r, 8), 3);
  auto expect = [&](const std::function<void(ServerRequest&)>& edit, const std::string& msg) {
    ServerRequest q;
    q.feeds = r.feeds;
    edit(q);
    ExpectErrorContaining([&] { l.CheckFeeds(q, 8); }, StatusCode::kInput, msg);
  };
  expect([](ServerRequest& q) { q.feeds.pop_back(); }, "expected 2 feeds, got 1");
  expect([](ServerRequest& q) { q.feeds[1].dtype = DType::kInt32; },
         "input 'mask': expected dtype int64, got int32");
  expect([](ServerRequest& q) { q.feeds[0].shape = {}; },
         "input 'obs': expected rows on axis 0, got a scalar");
  expect([](ServerRequest& q) { q.feeds[0].shape = {3, 3, 1}; },
         "input 'obs': expected rank 2, got shape (3, 3, 1)");
  expect([](ServerRequest& q) { q.feeds[1].shape = {2, 2}; },
         "input 'mask' has 2 rows, but input 'obs' has 3");
  expect([](ServerRequest& q) { q.feeds[0].shape[0] = q.feeds[1].shape[0] = 0; },
         "a request needs at least one row");
  expect([](ServerRequest& q) { q.feeds[0].shape[0] = q.feeds[1].shape[0] = 9; },
         "a request has 9 rows, more than max_batch (8)");
  expect([](ServerRequest& q) { q.done = {1, 1}; },
         "done must be one flag or one per row (3), got 2");
}

TEST(ServerLayout, ProbeShapesEveryInputAtGivenRows) {
  const ServerLayout l = ServerLayout::Build(Inputs(), Outputs(), StateOptions());
  int dummy = 0;
  const std::vector<TensorView> feeds = {TensorView{DType::kFloat32, {3, 3}, &dummy},
                                         TensorView{DType::kInt64, {3, 2}, &dummy}};
  const auto p = l.Probe(feeds, 5);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].shape, Shape({5, 3}));
  EXPECT_EQ(p[1].shape, Shape({2, 5, 4}));
  EXPECT_EQ(p[1].dtype, DType::kFloat32);
  EXPECT_EQ(p[2].shape, Shape({5, 2}));
  EXPECT_EQ(p[2].dtype, DType::kInt64);
  for (const auto& v : p) EXPECT_EQ(v.data, nullptr);
}

TEST(ServerLayout, BatchAxesFromShapesAtOneAndTwoRows) {
  ServerLayout l = ServerLayout::Build(Inputs(), Outputs(), StateOptions());
  auto views = [](std::vector<Shape> shapes) {
    std::vector<TensorView> v;
    for (auto& s : shapes) v.push_back(TensorView{DType::kFloat32, s, nullptr});
    return v;
  };
  l.out_state = {-1, 0, -1, -1};  // two more outputs, for this test only
  const auto axes =
      l.BatchAxes(views({{1, 5}, {2, 1, 4}, {7}, {1, 1}}), views({{2, 5}, {2, 2, 4}, {7}, {2, 1}}));
  EXPECT_EQ(axes, (std::vector<int>{0, 1, -1, 0}));
  ExpectErrorContaining(
      [&] {
        l.BatchAxes(views({{1, 5}, {1, 2, 4}, {7}, {1}}), views({{2, 5}, {2, 2, 4}, {7}, {2}}));
      },
      StatusCode::kInput,
      "state output 'hn' (shape (1, 2, 4) at batch 1, batch axis 0) does not "
      "match state input 'h0' ((2, 1, 4), batch axis 1)");
}

TEST(ServerLayout, FixedRowShapesAndKeys) {
  auto ins = Inputs();
  EXPECT_TRUE(ServerLayout::Build(ins, Outputs(), StateOptions()).FixedRowShapes());
  ins[2].dims = {-1, -1};
  EXPECT_FALSE(ServerLayout::Build(ins, Outputs(), StateOptions()).FixedRowShapes());
  ins[2].has_shape = false;
  EXPECT_FALSE(ServerLayout::Build(ins, Outputs(), StateOptions()).FixedRowShapes());

  const std::vector<TensorView> feeds = {TensorView{DType::kFloat32, {3, 3}, nullptr},
                                         TensorView{DType::kInt64, {3, 2, 6}, nullptr}};
  EXPECT_EQ(RowShapeKey(feeds), (std::vector<int64_t>{3, -1, 2, 6, -1}));
  const int64_t f32 = static_cast<int64_t>(DType::kFloat32);
  const int64_t i64 = static_cast<int64_t>(DType::kInt64);
  EXPECT_EQ(FeedShapeKey(feeds), (std::vector<int64_t>{f32, 2, 3, 3, i64, 3, 3, 2, 6}));
}

}  // namespace
}  // namespace kaiwu
