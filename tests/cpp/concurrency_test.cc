// Concurrency, written to be run under ThreadSanitizer (scripts/test_tsan.sh)
// as well as in the ordinary build: one session run from many threads at many
// shapes, refits while runs are in flight, and the server with actors joining
// and leaving, episodes ending, versions added, refitted and removed, close
// with requests in flight, and shared-memory clients stepping side by side.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "kaiwu/session.h"
#include "onnx.pb.h"
#include "runtime/server.h"
#include "runtime/server_shm.h"

namespace kaiwu {
namespace {

using kaiwu_onnx::ModelProto;
using kaiwu_onnx::TensorProto;

constexpr int kIn = 8, kOut = 16;

void Declare(kaiwu_onnx::ValueInfoProto* v, const std::string& name, std::vector<int64_t> dims) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(TensorProto::FLOAT);
  for (int64_t d : dims) {
    if (d < 0)
      tt->mutable_shape()->add_dim()->set_dim_param("batch");
    else
      tt->mutable_shape()->add_dim()->set_dim_value(d);
  }
}

kaiwu_onnx::NodeProto* AddNode(kaiwu_onnx::GraphProto* g, const char* op,
                               std::vector<std::string> ins, std::string out) {
  auto* n = g->add_node();
  n->set_op_type(op);
  for (auto& i : ins) n->add_input(i);
  n->add_output(out);
  return n;
}

// y = tanh(x @ w + b), x: [batch, 8], w: [8, 16] all equal to `w_value`, b: [16].
// With the optional recurrent state (h0 -> hn, [batch, 16]): hn = h0 + y.
std::shared_ptr<Session> Model(float w_value, bool with_state, int threads) {
  ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("conc");
  Declare(g->add_input(), "x", {-1, kIn});
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(TensorProto::FLOAT);
  w->add_dims(kIn);
  w->add_dims(kOut);
  for (int i = 0; i < kIn * kOut; ++i) w->add_float_data(w_value);
  auto* b = g->add_initializer();
  b->set_name("b");
  b->set_data_type(TensorProto::FLOAT);
  b->add_dims(kOut);
  for (int i = 0; i < kOut; ++i) b->add_float_data(0.0f);
  AddNode(g, "MatMul", {"x", "w"}, "h");
  AddNode(g, "Add", {"h", "b"}, "hb");
  AddNode(g, "Tanh", {"hb"}, "y");
  Declare(g->add_output(), "y", {-1, kOut});
  if (with_state) {
    Declare(g->add_input(), "h0", {-1, kOut});
    AddNode(g, "Add", {"h0", "y"}, "hn");
    Declare(g->add_output(), "hn", {-1, kOut});
  }
  std::string bytes = m.SerializeAsString();
  SessionOptions o;
  o.threads = threads;
  return std::shared_ptr<Session>(Session::Load(bytes.data(), bytes.size(), "", o));
}

// tanh(w * sum(x row)) for a row of x.
float Expected(const float* x_row, float w) {
  double s = 0;
  for (int k = 0; k < kIn; ++k) s += x_row[k];
  return static_cast<float>(std::tanh(w * s));
}

TEST(Concurrency, OneSessionManyThreadsManyShapes) {
  auto s = Model(0.05f, false, 2);
  const int kThreads = 4, kRuns = 30;
  std::atomic<int> wrong{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      for (int r = 0; r < kRuns; ++r) {
        const int64_t batch = 1 + (t * 7 + r) % 9;  // plans built and shared concurrently
        std::vector<float> x(batch * kIn);
        for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * float((i + t + r) % 11) - 0.5f;
        RunResult out = s->Run({TensorView{DType::kFloat32, Shape{batch, kIn}, x.data()}});
        const float* y = out.outputs[0].As<float>();
        for (int64_t row = 0; row < batch; ++row)
          if (std::fabs(y[row * kOut + 3] - Expected(&x[row * kIn], 0.05f)) > 1e-5f) ++wrong;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(s->num_plans(), 9);
}

TEST(Concurrency, RefitDuringRunsNeverMixesVersions) {
  auto s = Model(1.0f, false, 2);
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0}, runs{0};
  std::vector<float> ones(kIn * kOut, 0.01f), twos(kIn * kOut, 0.02f);
  int refits = 0;
  std::thread refitter([&] {
    // At least 40 refits, and on until the runners have run 100 times meanwhile.
    for (; refits < 40 || runs < 100; ++refits) {
      std::vector<float>& w = refits % 2 ? twos : ones;
      s->Refit({{"w", TensorView{DType::kFloat32, Shape{kIn, kOut}, w.data()}}}, false, true);
    }
    stop = true;
  });
  std::vector<std::thread> runners;
  for (int t = 0; t < 3; ++t) {
    runners.emplace_back([&] {
      std::vector<float> x(4 * kIn, 1.0f);
      while (!stop) {
        RunResult out = s->Run({TensorView{DType::kFloat32, Shape{4, kIn}, x.data()}});
        const float* y = out.outputs[0].As<float>();
        // Every element from one version: all tanh(0.08), all tanh(0.16) or all tanh(8).
        for (int i = 1; i < 4 * kOut; ++i)
          if (y[i] != y[0]) ++torn;
        ++runs;
      }
    });
  }
  refitter.join();
  for (auto& t : runners) t.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_GE(runs.load(), 100);
  EXPECT_EQ(s->weights_version(), static_cast<uint64_t>(refits));
}

TEST(Concurrency, GetWeightsDuringRefitsReadsOneVersion) {
  // `w` is only read packed (its GEMM panels are computed straight from the
  // given array), so get_weights() restores it from the panels of the version
  // it holds while refits publish new versions and runs go on.
  auto s = Model(1.0f, false, 2);
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0}, reads{0}, runs{0};
  std::vector<float> ones(kIn * kOut, 0.01f), twos(kIn * kOut, 0.02f);
  std::thread refitter([&] {
    for (int i = 0; i < 40 || reads < 50; ++i) {
      std::vector<float>& w = i % 2 ? twos : ones;
      s->Refit({{"w", TensorView{DType::kFloat32, Shape{kIn, kOut}, w.data()}}}, false, true);
    }
    stop = true;
  });
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      while (!stop) {
        const Tensor w = s->GetWeights({"w"}).at("w");
        const float* p = w.As<float>();
        for (int i = 0; i < kIn * kOut; ++i)
          if (p[i] != p[0] || (p[0] != 0.01f && p[0] != 0.02f && p[0] != 1.0f)) ++torn;
        ++reads;
      }
    });
  }
  readers.emplace_back([&] {
    std::vector<float> x(2 * kIn, 1.0f);
    while (!stop) {
      RunResult out = s->Run({TensorView{DType::kFloat32, Shape{2, kIn}, x.data()}});
      const float* y = out.outputs[0].As<float>();
      for (int i = 1; i < 2 * kOut; ++i)
        if (y[i] != y[0]) ++torn;
      ++runs;
    }
  });
  refitter.join();
  for (auto& t : readers) t.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_GE(reads.load(), 50);
}

TEST(Concurrency, ServerActorsVersionsAndCloseInFlight) {
  ServerOptions o;
  o.state = {{"h0", "hn"}};
  o.max_batch = 16;
  o.max_wait_us = 200;
  o.workers = 2;
  auto srv = std::make_shared<InferenceServer>(Model(0.05f, true, 2), o);
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0}, steps{0};
  std::vector<float> w2(kIn * kOut, 0.1f);
  std::thread admin([&] {
    for (int i = 0; !stop; ++i) {
      const std::string tag = "v" + std::to_string(i % 3);
      try {
        if (i % 4 == 3)
          srv->RemoveVersion(tag);
        else if (i % 4 == 2)
          srv->Refit({{"w", TensorView{DType::kFloat32, Shape{kIn, kOut}, w2.data()}}}, "", true,
                     false);
        else
          srv->AddVersion(tag, {{"w", TensorView{DType::kFloat32, Shape{kIn, kOut}, w2.data()}}},
                          false, false, "");
      } catch (const Error&) {
        // a tag that exists already or not yet: expected while racing
      }
      srv->Stats();
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  });
  std::vector<std::thread> actors;
  for (int a = 0; a < 6; ++a) {
    actors.emplace_back([&, a] {
      for (int episode = 0; episode < 3; ++episode) {
        const int64_t actor = a * 100 + episode;  // a new actor joins each episode
        std::vector<float> obs(2 * kIn, 0.1f * float(a + 1));
        for (int t = 0; t < 8; ++t) {
          auto r = std::make_shared<ServerRequest>();
          r->actor = actor;
          r->feeds.push_back(TensorView{DType::kFloat32, Shape{2, kIn}, obs.data()});
          if (t == 4) r->done = {1};
          try {
            srv->Submit(r);
          } catch (const Error&) {
            ++errors;
            continue;
          }
          r->Wait(-1);
          if (r->error) ++errors;
          ++steps;
        }
        if (episode % 2) srv->Reset(actor);
        srv->Release(actor);  // the actor leaves
      }
    });
  }
  for (auto& t : actors) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(srv->Stats().connected, 0);
  // Close while requests are queued and running: each finishes or fails with kClosed.
  std::vector<std::shared_ptr<ServerRequest>> last;
  std::vector<float> obs(kIn, 0.5f);
  for (int a = 0; a < 12; ++a) {
    auto r = std::make_shared<ServerRequest>();
    r->actor = 1000 + a;
    r->feeds.push_back(TensorView{DType::kFloat32, Shape{1, kIn}, obs.data()});
    srv->Submit(r);
    last.push_back(r);
  }
  std::thread closer([&] { srv->Close(); });
  for (auto& r : last) {
    r->Wait(-1);
    if (r->error) {
      try {
        std::rethrow_exception(r->error);
      } catch (const ServerError& e) {
        EXPECT_EQ(e.kind(), ServerError::kClosed);
      }
    }
  }
  closer.join();
  stop = true;
  admin.join();
  EXPECT_GT(steps.load(), 0);
}

TEST(Concurrency, SharedMemoryClientsStepSideBySide) {
  ServerOptions o;
  o.state = {{"h0", "hn"}};
  o.max_wait_us = 200;
  auto srv = std::make_shared<InferenceServer>(Model(0.05f, true, 1), o);
  const std::string name = "kaiwu_conc_test_" + std::to_string(::getpid());
  ShmServer shm(srv, name, 3, 2, 0);
  std::atomic<int> wrong{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 3; ++c) {
    clients.emplace_back([&, c] {
      for (int session = 0; session < 2; ++session) {  // leave and join again
        ShmClient client(name, 30);
        float acc[2] = {0, 0};
        for (int t = 0; t < 6; ++t) {
          float* in = static_cast<float*>(client.InputData(0));
          for (int i = 0; i < 2 * kIn; ++i) in[i] = 0.1f * float(c + 1);
          for (int r = 0; r < 2; ++r) acc[r] += Expected(in + r * kIn, 0.05f);
          auto out = client.Step(2, {}, "");
          const float* hn = out[1].As<float>();
          for (int r = 0; r < 2; ++r)
            if (std::fabs(hn[r * kOut] - acc[r]) > 1e-4f) ++wrong;
        }
        client.Close();
      }
    });
  }
  for (auto& t : clients) t.join();
  shm.Close();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace kaiwu
