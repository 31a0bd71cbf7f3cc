// Device-resident and page-locked I/O through the C++ API, proven by the
// session's counters: device feeds and results move nothing across PCIe,
// page-locked feeds skip the staging memcpy, results still held are never
// overwritten, and pointers on the wrong side are refused naming the input.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cuda_harness.h"
#include "kaiwu/session.h"
#include "onnx.pb.h"

namespace kaiwu {
namespace {

using kaiwu_onnx::TensorProto;

// obs [batch, 4] -> y = obs * w (w = 1, -2, 3, 0.5).
std::unique_ptr<Session> MulModel() {
  kaiwu_onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("mul");
  for (auto* v : {g->add_input(), g->add_output()}) {
    v->set_name(v == &g->input(0) ? "obs" : "y");
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("batch");
    tt->mutable_shape()->add_dim()->set_dim_value(4);
  }
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(TensorProto::FLOAT);
  w->add_dims(4);
  for (float f : {1.0f, -2.0f, 3.0f, 0.5f}) w->add_float_data(f);
  auto* n = g->add_node();
  n->set_op_type("Mul");
  n->add_input("obs");
  n->add_input("w");
  n->add_output("y");
  const std::string bytes = m.SerializeAsString();
  SessionOptions opts;
  opts.threads = 1;
  opts.device = "cuda";
  return Session::Load(bytes.data(), bytes.size(), "", opts);
}

std::vector<float> Obs(int rows, float base) {
  std::vector<float> v(rows * 4);
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + static_cast<float>(i);
  return v;
}

std::vector<float> Want(const std::vector<float>& obs) {
  const float w[4] = {1.0f, -2.0f, 3.0f, 0.5f};
  std::vector<float> y(obs.size());
  for (size_t i = 0; i < obs.size(); ++i) y[i] = obs[i] * w[i % 4];
  return y;
}

std::vector<float> Download(const void* device, size_t n) {
  std::vector<float> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

TEST(CudaIo, DeviceFeedsAndResultsMoveNothingAcrossPcie) {
  KAIWU_REQUIRE_CUDA();
  auto sess = MulModel();
  const std::vector<float> obs = Obs(5, 1.0f);
  float* d_obs = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_obs), obs.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_obs, obs.data(), obs.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  RunOptions opts;
  opts.device_outputs = true;
  TensorView feed{DType::kFloat32, {5, 4}, d_obs, MemoryKind::kDevice};
  sess->ResetIoStats();
  RunResult r = sess->Run({feed}, nullptr, nullptr, false, &opts);
  IoStats st = sess->io_stats();
  EXPECT_EQ(st.runs, 1u);
  EXPECT_EQ(st.h2d_bytes + st.d2h_bytes + st.staging_bytes, 0u);
  EXPECT_EQ(st.d2d_copies, 2u);
  EXPECT_EQ(st.d2d_bytes, 2 * obs.size() * sizeof(float));
  ASSERT_EQ(r.outputs[0].memory, MemoryKind::kDevice);
  EXPECT_EQ(Download(r.outputs[0].data, obs.size()), Want(obs));

  // Held results are never rewritten; dropped ones are reused.
  const std::vector<float> obs2 = Obs(5, -7.0f);
  ASSERT_EQ(cudaMemcpy(d_obs, obs2.data(), obs2.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  RunResult r2 = sess->Run({feed}, nullptr, nullptr, false, &opts);
  EXPECT_NE(r2.outputs[0].data, r.outputs[0].data);
  EXPECT_EQ(Download(r.outputs[0].data, obs.size()), Want(obs));
  EXPECT_EQ(Download(r2.outputs[0].data, obs2.size()), Want(obs2));
  const void* first = r.outputs[0].data;
  r = RunResult{};
  RunResult r3 = sess->Run({feed}, nullptr, nullptr, false, &opts);
  EXPECT_EQ(r3.outputs[0].data, first);
  cudaFree(d_obs);
}

TEST(CudaIo, PageLockedFeedsSkipTheStagingCopy) {
  KAIWU_REQUIRE_CUDA();
  auto sess = MulModel();
  const std::vector<float> obs = Obs(3, 0.25f);
  const size_t bytes = obs.size() * sizeof(float);
  std::shared_ptr<void> pinned = sess->AllocHostBuffer(bytes);
  std::memcpy(pinned.get(), obs.data(), bytes);
  sess->ResetIoStats();
  RunResult r = sess->Run({TensorView{DType::kFloat32, {3, 4}, pinned.get()}});
  IoStats st = sess->io_stats();
  EXPECT_EQ(st.staging_copies, 0u);
  EXPECT_EQ(st.h2d_copies, 1u);
  EXPECT_EQ(st.d2h_copies, 1u);  // into a page-locked result block
  EXPECT_EQ(std::vector<float>(r.outputs[0].As<float>(), r.outputs[0].As<float>() + obs.size()),
            Want(obs));
  sess->ResetIoStats();
  sess->Run({TensorView{DType::kFloat32, {3, 4}, const_cast<float*>(obs.data())}});
  EXPECT_EQ(sess->io_stats().staging_copies, 1u);  // a pageable feed is staged
}

TEST(CudaIo, HostPointerPassedAsDeviceMemoryIsRefusedNamingTheInput) {
  KAIWU_REQUIRE_CUDA();
  auto sess = MulModel();
  std::vector<float> obs = Obs(2, 0.0f);
  TensorView feed{DType::kFloat32, {2, 4}, obs.data(), MemoryKind::kDevice};
  try {
    sess->Run({feed});
    FAIL() << "expected kInput";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInput);
    EXPECT_NE(std::string(e.what()).find("input 'obs'"), std::string::npos) << e.what();
  }
  RunResult r = sess->Run({TensorView{DType::kFloat32, {2, 4}, obs.data()}});
  EXPECT_EQ(std::vector<float>(r.outputs[0].As<float>(), r.outputs[0].As<float>() + obs.size()),
            Want(obs));
}

}  // namespace
}  // namespace kaiwu
