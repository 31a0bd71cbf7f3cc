// ServerShapes on a small model: output batch axes found by shape inference
// (axis 0, axis 1 and none), the shapes at one row, and feeds the model
// refuses.
#include "runtime/server_shapes.h"

#include <gtest/gtest.h>

#include "onnx.pb.h"
#include "server_test_util.h"

namespace kaiwu {
namespace {

using kaiwu_onnx::TensorProto;

void AddValue(kaiwu_onnx::ValueInfoProto* v, const std::string& name, std::vector<int64_t> dims) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(TensorProto::FLOAT);
  auto* shape = tt->mutable_shape();
  for (int64_t d : dims) {
    if (d < 0)
      shape->add_dim()->set_dim_param("batch");
    else
      shape->add_dim()->set_dim_value(d);
  }
}

// obs [batch, 3] -> y = obs * w [batch, 3], t = y^T [3, batch], s = sum(obs) [].
std::shared_ptr<Session> Model() {
  kaiwu_onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("shapes");
  AddValue(g->add_input(), "obs", {-1, 3});
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(TensorProto::FLOAT);
  w->add_dims(3);
  for (float f : {0.5f, -2.0f, 3.0f}) w->add_float_data(f);
  auto node = [&](const std::string& op, std::vector<std::string> in, const std::string& out) {
    auto* n = g->add_node();
    n->set_op_type(op);
    for (const auto& i : in) n->add_input(i);
    n->add_output(out);
    return n;
  };
  node("Mul", {"obs", "w"}, "y");
  node("Transpose", {"y"}, "t");
  auto* a = node("ReduceSum", {"obs"}, "s")->add_attribute();
  a->set_name("keepdims");
  a->set_type(kaiwu_onnx::AttributeProto::INT);
  a->set_i(0);
  AddValue(g->add_output(), "y", {-1, 3});
  AddValue(g->add_output(), "t", {3, -1});
  AddValue(g->add_output(), "s", {});
  const std::string bytes = m.SerializeAsString();
  return std::shared_ptr<Session>(
      Session::Load(bytes.data(), bytes.size(), "", SessionOptions{1, true}));
}

TEST(ServerShapes, OutputAxesAndLayoutAtOneRow) {
  auto session = Model();
  const ServerLayout layout =
      ServerLayout::Build(session->inputs(), session->outputs(), ServerOptions{});
  ServerShapes shapes(*session, layout);
  const std::vector<TensorView> feeds = {TensorView{DType::kFloat32, {5, 3}, nullptr}};
  EXPECT_EQ(shapes.OutputAxes(feeds), (std::vector<int>{0, 1, -1}));
  EXPECT_EQ(shapes.OutputAxes(feeds), (std::vector<int>{0, 1, -1}));  // cached
  std::vector<TensorView> at1;
  EXPECT_EQ(shapes.OutputLayout(&at1), (std::vector<int>{0, 1, -1}));
  ASSERT_EQ(at1.size(), 3u);
  EXPECT_EQ(at1[0].shape, Shape({1, 3}));
  EXPECT_EQ(at1[1].shape, Shape({3, 1}));
  EXPECT_EQ(at1[2].shape, Shape({}));
}

TEST(ServerShapes, CheckRefusesFeedsTheModelCannotTake) {
  auto session = Model();
  const ServerLayout layout =
      ServerLayout::Build(session->inputs(), session->outputs(), ServerOptions{});
  ServerShapes shapes(*session, layout);
  ServerRequest ok;
  ok.feeds = {TensorView{DType::kFloat32, {2, 3}, nullptr}};
  shapes.Check(ok, 2, 2);
  shapes.Check(ok, 2, 2);  // cached
  ServerRequest bad;
  bad.feeds = {TensorView{DType::kFloat32, {2, 4}, nullptr}};
  testing::ExpectErrorContaining([&] { shapes.Check(bad, 2, 2); }, StatusCode::kInput, "obs");
  // Checked at the padded size it runs as, the error still comes from its own rows.
  testing::ExpectErrorContaining([&] { shapes.Check(bad, 2, 4); }, StatusCode::kInput, "obs");
}

TEST(ServerShapes, CheckGoesThroughThePlanOfTheRowsThatRun) {
  auto session = Model();
  const ServerLayout layout =
      ServerLayout::Build(session->inputs(), session->outputs(), ServerOptions{});
  ServerShapes shapes(*session, layout);
  const int before = session->num_plans();
  ServerRequest three, four;
  three.feeds = {TensorView{DType::kFloat32, {3, 3}, nullptr}};
  four.feeds = {TensorView{DType::kFloat32, {4, 3}, nullptr}};
  shapes.Check(three, 3, 4);  // padded to 4 rows
  EXPECT_EQ(session->num_plans(), before + 1);
  shapes.Check(four, 4, 4);  // the same plan
  EXPECT_EQ(session->num_plans(), before + 1);
}

TEST(ServerShapes, OutputLayoutNeedsFixedRowShapes) {
  auto session = Model();
  ServerLayout layout = ServerLayout::Build(session->inputs(), session->outputs(), ServerOptions{});
  layout.feed_inputs[0].dims = {-1, -1};
  ServerShapes shapes(*session, layout);
  std::vector<TensorView> at1;
  testing::ExpectErrorContaining(
      [&] { shapes.OutputLayout(&at1); }, StatusCode::kInput,
      "input 'obs': dimension 1 is not fixed; shared-memory clients need fixed per-row shapes");
}

}  // namespace
}  // namespace kaiwu
