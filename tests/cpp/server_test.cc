// InferenceServer core: batching across actor threads, per-actor state with
// the batch on axis 1, done flags, versions, bad feeds, close.
#include "runtime/server.h"
#include "runtime/server_shm.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <thread>

#include "onnx.pb.h"

namespace kaiwu {
namespace {

using kaiwu_onnx::ModelProto;
using kaiwu_onnx::TensorProto;

constexpr int kH = 3;

void AddValue(kaiwu_onnx::ValueInfoProto* v, const std::string& name, bool batch_on_1) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(TensorProto::FLOAT);
  if (batch_on_1) tt->mutable_shape()->add_dim()->set_dim_value(1);
  tt->mutable_shape()->add_dim()->set_dim_param("batch");
  tt->mutable_shape()->add_dim()->set_dim_value(kH);
}

// hn = h0 + obs * w (h0, hn: [1, batch, H]; obs: [batch, H]); y = hn * w.
std::shared_ptr<Session> Accumulator() {
  ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("acc");
  AddValue(g->add_input(), "obs", false);
  AddValue(g->add_input(), "h0", true);
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(TensorProto::FLOAT);
  w->add_dims(kH);
  for (int i = 0; i < kH; ++i) w->add_float_data(1.0f);
  auto* n1 = g->add_node();
  n1->set_op_type("Mul");
  n1->add_input("obs");
  n1->add_input("w");
  n1->add_output("ow");
  auto* n2 = g->add_node();
  n2->set_op_type("Add");
  n2->add_input("h0");
  n2->add_input("ow");
  n2->add_output("hn");
  auto* n3 = g->add_node();
  n3->set_op_type("Mul");
  n3->add_input("hn");
  n3->add_input("w");
  n3->add_output("y");
  AddValue(g->add_output(), "y", true);
  AddValue(g->add_output(), "hn", true);
  std::string bytes = m.SerializeAsString();
  return std::shared_ptr<Session>(Session::Load(bytes.data(), bytes.size(), "", SessionOptions{1, true}));
}

std::shared_ptr<ServerRequest> Request(int64_t actor, std::vector<float>* obs, int64_t rows) {
  auto r = std::make_shared<ServerRequest>();
  r->actor = actor;
  r->feeds.push_back(TensorView{DType::kFloat32, Shape{rows, kH}, obs->data()});
  return r;
}

TEST(Server, BatchesActorsAndKeepsStatePerRowOnAxis1) {
  ServerOptions o;
  o.state = {{"h0", "hn"}};
  o.max_wait_us = 2000;
  InferenceServer srv(Accumulator(), o);
  EXPECT_EQ(srv.state_batch_axis(0), 1);
  const int kActors = 6, kSteps = 20;
  std::vector<std::thread> ts;
  std::vector<int> failures(kActors, 0);
  for (int a = 0; a < kActors; ++a) {
    ts.emplace_back([&, a] {
      const int rows = 1 + a % 2;
      float expect[2] = {0, 0};
      for (int t = 0; t < kSteps; ++t) {
        std::vector<float> obs(rows * kH);
        for (int r = 0; r < rows; ++r)
          for (int k = 0; k < kH; ++k) obs[r * kH + k] = float(a + r + 1);
        auto req = Request(a, &obs, rows);
        if (t == 10) req->done = {1};  // episode end: state zeroed before the step
        srv.Submit(req);
        req->Wait(-1);
        if (req->error) {
          ++failures[a];
          continue;
        }
        for (int r = 0; r < rows; ++r) {
          expect[r] = (t == 10 ? 0 : expect[r]) + float(a + r + 1);
          const float* y = req->outputs[0].As<float>();
          if (y[r * kH] != expect[r]) ++failures[a];
        }
        if (req->outputs[0].shape != Shape({1, rows, kH})) ++failures[a];
      }
    });
  }
  for (auto& t : ts) t.join();
  for (int a = 0; a < kActors; ++a) EXPECT_EQ(failures[a], 0) << "actor " << a;
  ServerStats s = srv.Stats();
  EXPECT_EQ(s.requests, uint64_t(kActors * kSteps));
  EXPECT_GT(double(s.rows) / s.batches, 1.0);
}

TEST(Server, VersionsBadFeedsAndClose) {
  ServerOptions o;
  o.state = {{"h0", "hn"}};
  InferenceServer srv(Accumulator(), o);
  float two[kH] = {2, 2, 2};
  srv.AddVersion("x2", {{"w", TensorView{DType::kFloat32, Shape{kH}, two}}}, true, false, "");
  EXPECT_EQ(srv.Latest(), "x2");
  std::vector<float> obs(kH, 1.0f);
  auto r1 = Request(1, &obs, 1);
  r1->version = "base";
  auto r2 = Request(2, &obs, 1);
  srv.Submit(r1);
  srv.Submit(r2);
  r1->Wait(-1);
  r2->Wait(-1);
  ASSERT_FALSE(r1->error);
  ASSERT_FALSE(r2->error);
  EXPECT_EQ(r1->outputs[0].As<float>()[0], 1.0f);
  EXPECT_EQ(r2->outputs[0].As<float>()[0], 4.0f);

  std::vector<float> bad(kH + 1, 1.0f);
  auto rb = std::make_shared<ServerRequest>();
  rb->actor = 3;
  rb->feeds.push_back(TensorView{DType::kFloat32, Shape{1, kH + 1}, bad.data()});
  try {
    srv.Submit(rb);
    FAIL() << "bad feeds accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInput);
  }
  srv.Close();
  auto rc = Request(4, &obs, 1);
  EXPECT_THROW(srv.Submit(rc), ServerError);
}

TEST(Server, ShmClientStepsThroughSharedMemory) {
  ServerOptions o;
  o.state = {{"h0", "hn"}};
  auto srv = std::make_shared<InferenceServer>(Accumulator(), o);
  const std::string name = "kaiwu_server_test_" + std::to_string(::getpid());
  ShmServer shm(srv, name, 2, 4, 0);
  ShmClient a(name, 5), b(name, 5);
  EXPECT_THROW(ShmClient(name, 0.1), Error);  // both slots taken
  ASSERT_EQ(a.inputs().size(), 1u);
  ASSERT_EQ(a.outputs().size(), 2u);
  EXPECT_EQ(a.outputs()[0].axis, 1);
  for (int t = 1; t <= 3; ++t) {
    float* in = static_cast<float*>(a.InputData(0));
    for (int i = 0; i < 2 * kH; ++i) in[i] = 1.0f;
    auto out = a.Step(2, {}, "");
    ASSERT_EQ(out[0].shape, Shape({1, 2, kH}));
    EXPECT_EQ(out[0].As<float>()[kH], float(t));  // state accumulates per row
  }
  auto out = a.Step(2, {1}, "");  // done: zeroed before the step
  EXPECT_EQ(out[0].As<float>()[0], 1.0f);
  try {
    a.Step(2, {}, "missing");
    FAIL() << "unknown version accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInput);
  }
  b.Close();
  ShmClient c(name, 5);  // b's slot is free again
  shm.Close();
  EXPECT_THROW(c.Step(1, {}, ""), ServerError);
}

}  // namespace
}  // namespace kaiwu
