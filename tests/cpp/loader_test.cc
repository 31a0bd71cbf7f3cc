#include "onnx/loader.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "core/memory_budget.h"
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

// The message of the Error that loading `bytes` raises ("" if none), and its code.
std::string MessageOf(const std::string& bytes, StatusCode* code, const std::string& dir = "") {
  try {
    LoadOnnxModel(bytes.data(), bytes.size(), dir);
  } catch (const Error& e) {
    *code = e.code();
    return e.what();
  }
  *code = StatusCode::kOk;
  return "";
}

void ExpectModelError(const ModelProto& m, const std::string& part, const std::string& dir = "") {
  StatusCode code;
  std::string msg = MessageOf(m.SerializeAsString(), &code, dir);
  EXPECT_EQ(code, StatusCode::kModel) << msg;
  EXPECT_NE(msg.find(part), std::string::npos) << msg;
}

TensorProto* HugeInitializer(ModelProto* m) {
  auto* init = m->mutable_graph()->add_initializer();
  init->set_name("w");
  init->set_data_type(TensorProto::FLOAT);
  init->add_dims(int64_t{1} << 40);
  return init;
}

TEST(Loader, DeclaredDimsAreCheckedAgainstTheDataBeforeAllocation) {
  ModelProto raw = BaseModel();
  HugeInitializer(&raw)->set_raw_data(std::string(16, '\0'));
  ExpectModelError(raw, "tensor 'w' has 16 bytes of raw data but its shape (1099511627776,)");
  ModelProto typed = BaseModel();
  HugeInitializer(&typed)->add_float_data(1.0f);
  ExpectModelError(typed, "tensor 'w' holds 1 values but its shape (1099511627776,) needs");
  ModelProto empty = BaseModel();
  HugeInitializer(&empty);
  ExpectModelError(empty, "tensor 'w' holds 0 values");
  ModelProto overflow = BaseModel();
  auto* o = HugeInitializer(&overflow);
  o->add_dims(int64_t{1} << 40);
  o->set_raw_data(std::string(16, '\0'));
  ExpectModelError(overflow, "whose size in bytes does not fit in 64 bits");
}

TEST(Loader, ExternalDataSizesAreCheckedAgainstTheFile) {
  auto dir = std::filesystem::temp_directory_path() / "kaiwu_loader_sizes_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "w.bin", std::ios::binary).write(std::string(16, '\1').data(), 16);
  auto with = [&](int64_t dims, std::vector<std::pair<std::string, std::string>> kvs) {
    ModelProto m = WithExternal("w.bin");
    auto* init = m.mutable_graph()->mutable_initializer(0);
    init->set_dims(0, dims);
    for (const auto& [k, v] : kvs) {
      auto* kv = init->add_external_data();
      kv->set_key(k);
      kv->set_value(v);
    }
    return m;
  };
  const std::string d = dir.string();
  ExpectModelError(with(int64_t{1} << 40, {}), "is too short (wanted 4398046511104 bytes", d);
  ExpectModelError(with(4, {{"offset", "8"}}), "is too short (wanted 16 bytes at offset 8", d);
  ExpectModelError(with(4, {{"length", "99"}}), "external data length 99 does not match", d);
  ExpectModelError(with(4, {{"offset", "abc"}}), "external data offset 'abc' is not", d);
  ExpectModelError(with(4, {{"offset", "-4"}}), "external data offset '-4' is not", d);
  ExpectModelError(with(4, {{"length", "99999999999999999999999"}}), "external data length", d);
  StatusCode code;
  MessageOf(with(4, {{"offset", "0"}, {"length", "16"}}).SerializeAsString(), &code, d);
  EXPECT_EQ(code, StatusCode::kOk);
}

TEST(Loader, NamesAndStringsMustBeUtf8) {
  ModelProto node_name = BaseModel();
  auto* n = node_name.mutable_graph()->add_node();
  n->set_op_type("Relu");
  n->set_name("relu\xff");
  n->add_input("x");
  n->add_output("y");
  ExpectModelError(node_name, "node #0 (Relu): the node name is not valid UTF-8 ('relu\\xff')");
  ModelProto attr = node_name;
  attr.mutable_graph()->mutable_node(0)->set_name("relu");
  auto* a = attr.mutable_graph()->mutable_node(0)->add_attribute();
  a->set_name("mode");
  a->set_type(kaiwu_onnx::AttributeProto::STRING);
  a->set_s(
      "lin\xe9"
      "ar");
  ExpectModelError(attr, "Relu node 'relu': attribute 'mode' is not valid UTF-8 ('lin\\xe9ar')");
  ModelProto meta = BaseModel();
  auto* p = meta.add_metadata_props();
  p->set_key("author");
  p->set_value("\xc3\x28");
  ExpectModelError(meta, "metadata 'author' is not valid UTF-8");
  ModelProto dim = BaseModel();
  dim.mutable_graph()
      ->mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(0)
      ->set_dim_param("b\x80");
  ExpectModelError(dim, "input 'x': a dimension name is not valid UTF-8 ('b\\x80')");
}

TEST(Loader, TensorsOverTheMemoryBudgetAreRefusedBeforeAllocation) {
  ModelProto m = BaseModel();
  auto* init = m.mutable_graph()->add_initializer();
  init->set_name("w");
  init->set_data_type(TensorProto::FLOAT);
  init->add_dims(1024);
  init->set_raw_data(std::string(4096, '\0'));
  StatusCode code;
  {
    MemoryBudgetScope budget(8192);
    MessageOf(m.SerializeAsString(), &code);
    EXPECT_EQ(code, StatusCode::kOk);
  }
  MemoryBudgetScope budget(4000);
  ExpectModelError(m, "tensor 'w' (shape (1024,), float32, 4.0 KiB) does not fit");
}

}  // namespace
}  // namespace kaiwu
