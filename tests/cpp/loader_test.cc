#include "onnx/loader.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "onnx.pb.h"

namespace kaiwu {
namespace {

using kaiwu_onnx::ModelProto;
using kaiwu_onnx::TensorProto;

ModelProto BaseModel(int opset = 17) {
  ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(opset);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto* in = g->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_param("batch");
  tt->mutable_shape()->add_dim()->set_dim_value(4);
  g->add_output()->set_name("x");
  return m;
}

StatusCode CodeOf(const std::string& bytes, const std::string& dir = "") {
  try {
    LoadOnnxModel(bytes.data(), bytes.size(), dir);
  } catch (const Error& e) {
    return e.code();
  }
  return StatusCode::kOk;
}

TEST(Loader, ImportsInputsWithSymbolicDims) {
  std::string bytes = BaseModel().SerializeAsString();
  Graph g = LoadOnnxModel(bytes.data(), bytes.size(), "");
  ASSERT_EQ(g.inputs.size(), 1u);
  const Value& x = g.values[g.inputs[0]];
  EXPECT_EQ(x.dtype, DType::kFloat32);
  ASSERT_EQ(x.dims.size(), 2u);
  EXPECT_EQ(x.dims[0].symbol, "batch");
  EXPECT_EQ(x.dims[1].value, 4);
}

TEST(Loader, TruncatedBytesAreAModelError) {
  ModelProto m = BaseModel();
  auto* init = m.mutable_graph()->add_initializer();
  init->set_name("w");
  init->set_data_type(TensorProto::FLOAT);
  init->add_dims(64);
  init->set_raw_data(std::string(256, '\1'));
  std::string bytes = m.SerializeAsString();
  EXPECT_EQ(CodeOf(bytes.substr(0, bytes.size() / 2)), StatusCode::kModel);
  EXPECT_EQ(CodeOf(""), StatusCode::kModel);
}

TEST(Loader, OldOpsetIsRefused) {
  EXPECT_EQ(CodeOf(BaseModel(11).SerializeAsString()), StatusCode::kModel);
}

TEST(Loader, EveryUnsupportedNodeIsListed) {
  ModelProto m = BaseModel();
  for (const char* op : {"NoSuchOpA", "NoSuchOpB"}) {
    auto* n = m.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(std::string("node_") + op);
    n->add_input("x");
    n->add_output(std::string("out_") + op);
  }
  std::string bytes = m.SerializeAsString();
  try {
    LoadOnnxModel(bytes.data(), bytes.size(), "");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kUnsupported);
    std::string msg = e.what();
    EXPECT_NE(msg.find("NoSuchOpA (node 'node_NoSuchOpA'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("NoSuchOpB (node 'node_NoSuchOpB'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("opset 17"), std::string::npos) << msg;
  }
}

ModelProto WithExternal(const std::string& location) {
  ModelProto m = BaseModel();
  auto* init = m.mutable_graph()->add_initializer();
  init->set_name("w");
  init->set_data_type(TensorProto::FLOAT);
  init->add_dims(4);
  init->set_data_location(TensorProto::EXTERNAL);
  auto* kv = init->add_external_data();
  kv->set_key("location");
  kv->set_value(location);
  return m;
}

TEST(Loader, ExternalDataLoadsFromTheModelDirectory) {
  auto dir = std::filesystem::temp_directory_path() / "kaiwu_loader_test";
  std::filesystem::create_directories(dir);
  float values[4] = {1.5f, -2.f, 3.25f, 4.f};
  std::ofstream(dir / "w.bin", std::ios::binary).write(reinterpret_cast<char*>(values), sizeof(values));
  std::string bytes = WithExternal("w.bin").SerializeAsString();
  Graph g = LoadOnnxModel(bytes.data(), bytes.size(), dir.string());
  const Value& w = g.values[g.Find("w")];
  ASSERT_TRUE(w.data);
  EXPECT_EQ(w.data->As<float>()[2], 3.25f);
  // Missing file, escaping paths, and no base directory.
  EXPECT_EQ(CodeOf(WithExternal("missing.bin").SerializeAsString(), dir.string()),
            StatusCode::kFileNotFound);
  EXPECT_EQ(CodeOf(WithExternal("../w.bin").SerializeAsString(), dir.string()), StatusCode::kModel);
  EXPECT_EQ(CodeOf(WithExternal("/etc/passwd").SerializeAsString(), dir.string()), StatusCode::kModel);
  EXPECT_EQ(CodeOf(WithExternal("w.bin").SerializeAsString(), ""), StatusCode::kModel);
}

}  // namespace
}  // namespace kaiwu
