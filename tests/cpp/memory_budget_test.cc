// The memory budget: byte counts that cannot overflow, parsing of
// $KAIWU_MEMORY_BUDGET, scopes, and plans refused before their arena exists.
#include "core/memory_budget.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "kaiwu/session.h"
#include "onnx.pb.h"
#include "server_test_util.h"

namespace kaiwu {
namespace {

using kaiwu_onnx::ModelProto;
using kaiwu_onnx::TensorProto;
using testing::ExpectErrorContaining;

TEST(MemoryBudget, TensorBytesRefusesOverflowAndNegativeDims) {
  uint64_t b = 0;
  ASSERT_TRUE(TensorBytes({2, 3}, DType::kFloat32, &b));
  EXPECT_EQ(b, 24u);
  ASSERT_TRUE(TensorBytes({}, DType::kInt64, &b));
  EXPECT_EQ(b, 8u);
  ASSERT_TRUE(TensorBytes({int64_t{1} << 62, 0}, DType::kFloat32, &b));  // empty
  EXPECT_EQ(b, 0u);
  EXPECT_FALSE(TensorBytes({int64_t{1} << 32, int64_t{1} << 32}, DType::kFloat32, &b));
  EXPECT_FALSE(TensorBytes({int64_t{1} << 61}, DType::kFloat32, &b));  // past 2^63 bytes
  EXPECT_FALSE(TensorBytes({4, -1}, DType::kFloat32, &b));
  EXPECT_EQ(AddBytes(UINT64_MAX - 1, 5), UINT64_MAX);
}

TEST(MemoryBudget, ParsesByteCounts) {
  uint64_t b = 0;
  ASSERT_TRUE(ParseByteCount("1048576", &b));
  EXPECT_EQ(b, 1048576u);
  ASSERT_TRUE(ParseByteCount("512M", &b));
  EXPECT_EQ(b, 512u << 20);
  ASSERT_TRUE(ParseByteCount("8GiB", &b));
  EXPECT_EQ(b, uint64_t{8} << 30);
  ASSERT_TRUE(ParseByteCount("1.5g", &b));
  EXPECT_EQ(b, uint64_t{3} << 29);
  ASSERT_TRUE(ParseByteCount("2TB", &b));
  EXPECT_EQ(b, uint64_t{2} << 40);
  for (const char* bad : {"", "G", "12X", "1..2", "-5", "abc", "5 G"})
    EXPECT_FALSE(ParseByteCount(bad, &b)) << bad;
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(3u << 20), "3.0 MiB");
  EXPECT_EQ(FormatBytes(UINT64_MAX), "more than 16 EiB");
}

TEST(MemoryBudget, EnvironmentAndScopes) {
  const char* old = std::getenv("KAIWU_MEMORY_BUDGET");
  std::string saved = old ? old : "";
  setenv("KAIWU_MEMORY_BUDGET", "64M", 1);
  EXPECT_EQ(DefaultMemoryBudget(), uint64_t{64} << 20);
  EXPECT_EQ(CurrentMemoryBudget(), uint64_t{64} << 20);
  {
    MemoryBudgetScope outer(1000);
    EXPECT_EQ(CurrentMemoryBudget(), 1000u);
    {
      MemoryBudgetScope inner(0);  // 0: the default
      EXPECT_EQ(CurrentMemoryBudget(), uint64_t{64} << 20);
    }
    EXPECT_EQ(CurrentMemoryBudget(), 1000u);
  }
  setenv("KAIWU_MEMORY_BUDGET", "lots", 1);
  ExpectErrorContaining([] { DefaultMemoryBudget(); }, StatusCode::kInput,
                        "KAIWU_MEMORY_BUDGET='lots' is not a positive byte count");
  if (old)
    setenv("KAIWU_MEMORY_BUDGET", saved.c_str(), 1);
  else
    unsetenv("KAIWU_MEMORY_BUDGET");
  EXPECT_GT(DefaultMemoryBudget(), uint64_t{1} << 20);
}

// y = Tanh(x @ w), x: [batch, 8], w: [8, 256].
std::string WideModel() {
  ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("wide");
  auto declare = [](kaiwu_onnx::ValueInfoProto* v, const char* name, int width) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("batch");
    tt->mutable_shape()->add_dim()->set_dim_value(width);
  };
  declare(g->add_input(), "x", 8);
  declare(g->add_output(), "y", 256);
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(TensorProto::FLOAT);
  w->add_dims(8);
  w->add_dims(256);
  for (int i = 0; i < 8 * 256; ++i) w->add_float_data(0.01f);
  auto* mm = g->add_node();
  mm->set_op_type("MatMul");
  mm->add_input("x");
  mm->add_input("w");
  mm->add_output("h");
  auto* t = g->add_node();
  t->set_op_type("Tanh");
  t->add_input("h");
  t->add_output("y");
  return m.SerializeAsString();
}

TEST(MemoryBudget, PlansOverTheBudgetAreInputErrorsNamingTheBatch) {
  std::string bytes = WideModel();
  SessionOptions opt;
  opt.threads = 1;
  opt.optimize = false;         // keep h as an arena buffer (no MatMul+Tanh fusion)
  opt.memory_budget = 1 << 20;  // 1 MiB: h and y of 1024 rows need 2 MiB
  auto s = Session::Load(bytes.data(), bytes.size(), "", opt);
  std::vector<float> x(1024 * 8, 1.0f);
  s->Run({TensorView{DType::kFloat32, Shape{16, 8}, x.data()}});
  ExpectErrorContaining([&] { s->Run({TensorView{DType::kFloat32, Shape{1024, 8}, x.data()}}); },
                        StatusCode::kInput,
                        "the largest dimension the model leaves free: input 'x' dimension 0 "
                        "('batch') is 1024");
  ExpectErrorContaining([&] { s->Run({TensorView{DType::kFloat32, Shape{1024, 8}, x.data()}}); },
                        StatusCode::kInput, "the execution plan needs 2.0 MiB");
  EXPECT_EQ(s->num_plans(), 1);  // the refused plan is not cached
  // The weights alone (8 KiB) over a smaller budget: refused at load.
  opt.memory_budget = 4096;
  ExpectErrorContaining([&] { Session::Load(bytes.data(), bytes.size(), "", opt); },
                        StatusCode::kModel, "tensor 'w' (shape (8, 256), float32, 8.0 KiB)");
}

}  // namespace
}  // namespace kaiwu
