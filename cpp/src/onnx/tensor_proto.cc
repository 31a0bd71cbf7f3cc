#include "onnx/tensor_proto.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "kaiwu/status.h"

namespace kaiwu {

namespace fs = std::filesystem;
using kaiwu_onnx::TensorProto;

DType DTypeFromOnnx(int32_t code) {
  switch (code) {
    case TensorProto::FLOAT: return DType::kFloat32;
    case TensorProto::DOUBLE: return DType::kFloat64;
    case TensorProto::FLOAT16: return DType::kFloat16;
    case TensorProto::INT8: return DType::kInt8;
    case TensorProto::UINT8: return DType::kUInt8;
    case TensorProto::INT16: return DType::kInt16;
    case TensorProto::INT32: return DType::kInt32;
    case TensorProto::INT64: return DType::kInt64;
    case TensorProto::BOOL: return DType::kBool;
    case TensorProto::BFLOAT16: return DType::kBFloat16;
    default: return DType::kUndefined;
  }
}

namespace {

// Resolves an external-data location, refusing anything outside base_dir.
fs::path ResolveExternal(const std::string& location, const std::string& base_dir,
                         const std::string& what) {
  if (base_dir.empty())
    Fail(StatusCode::kModel, "tensor '", what, "' stores its data in external file '", location,
         "', but the model was not loaded from a file path; load it by path so the file can be "
         "found next to it");
  fs::path loc(location);
  if (loc.is_absolute())
    Fail(StatusCode::kModel, "tensor '", what, "': external data location '", location,
         "' is an absolute path; only paths inside the model's directory are allowed");
  for (const auto& part : loc)
    if (part == "..")
      Fail(StatusCode::kModel, "tensor '", what, "': external data location '", location,
           "' escapes the model's directory ('..' is not allowed)");
  fs::path base = fs::weakly_canonical(fs::path(base_dir));
  fs::path full = fs::weakly_canonical(base / loc);
  auto rel = full.lexically_relative(base);
  if (rel.empty() || *rel.begin() == "..")
    Fail(StatusCode::kModel, "tensor '", what, "': external data location '", location,
         "' resolves outside the model's directory");
  return full;
}

void ReadExternal(const TensorProto& proto, const std::string& base_dir, const std::string& what,
                  Tensor* out) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : proto.external_data()) {
    if (kv.key() == "location") location = kv.value();
    if (kv.key() == "offset") offset = std::stoll(kv.value());
    if (kv.key() == "length") length = std::stoll(kv.value());
  }
  if (location.empty())
    Fail(StatusCode::kModel, "tensor '", what, "' has external data without a location");
  fs::path path = ResolveExternal(location, base_dir, what);
  std::ifstream f(path, std::ios::binary);
  if (!f)
    Fail(StatusCode::kFileNotFound, "tensor '", what, "': external data file '", path.string(),
         "' cannot be opened");
  int64_t want = static_cast<int64_t>(out->bytes());
  if (length >= 0 && length != want)
    Fail(StatusCode::kModel, "tensor '", what, "': external data length ", length,
         " does not match its shape and dtype (", want, " bytes)");
  f.seekg(offset);
  f.read(static_cast<char*>(out->data()), want);
  if (f.gcount() != want)
    Fail(StatusCode::kModel, "tensor '", what, "': external data file '", path.string(),
         "' is too short (wanted ", want, " bytes at offset ", offset, ")");
}

template <typename Dst, typename Field>
void CopyField(const Field& field, Tensor* out, const std::string& what) {
  if (static_cast<int64_t>(field.size()) != out->size())
    Fail(StatusCode::kModel, "tensor '", what, "' holds ", field.size(), " values but its shape ",
         ShapeToString(out->shape()), " needs ", out->size());
  Dst* dst = out->As<Dst>();
  for (int i = 0; i < field.size(); ++i) dst[i] = static_cast<Dst>(field.Get(i));
}

}  // namespace

Tensor TensorFromProto(const TensorProto& proto, const std::string& base_dir,
                       const std::string& what) {
  DType dtype = DTypeFromOnnx(proto.data_type());
  if (dtype == DType::kUndefined)
    Fail(StatusCode::kUnsupported, "tensor '", what, "' has ONNX data type ", proto.data_type(),
         ", which kaiwu_infer does not support");
  Shape shape(proto.dims().begin(), proto.dims().end());
  for (int64_t d : shape)
    if (d < 0) Fail(StatusCode::kModel, "tensor '", what, "' has a negative dimension");
  Tensor t(dtype, shape);
  if (proto.data_location() == TensorProto::EXTERNAL) {
    ReadExternal(proto, base_dir, what, &t);
    return t;
  }
  if (proto.has_raw_data()) {
    if (proto.raw_data().size() != t.bytes())
      Fail(StatusCode::kModel, "tensor '", what, "' has ", proto.raw_data().size(),
           " bytes of raw data but its shape ", ShapeToString(shape), " and dtype ",
           DTypeName(dtype), " need ", t.bytes());
    std::memcpy(t.data(), proto.raw_data().data(), t.bytes());
    return t;
  }
  switch (dtype) {
    case DType::kFloat32: CopyField<float>(proto.float_data(), &t, what); break;
    case DType::kFloat64: CopyField<double>(proto.double_data(), &t, what); break;
    case DType::kInt64: CopyField<int64_t>(proto.int64_data(), &t, what); break;
    case DType::kInt32: CopyField<int32_t>(proto.int32_data(), &t, what); break;
    case DType::kInt16: CopyField<int16_t>(proto.int32_data(), &t, what); break;
    case DType::kInt8: CopyField<int8_t>(proto.int32_data(), &t, what); break;
    case DType::kUInt8: CopyField<uint8_t>(proto.int32_data(), &t, what); break;
    case DType::kBool: CopyField<bool>(proto.int32_data(), &t, what); break;
    case DType::kFloat16: CopyField<uint16_t>(proto.int32_data(), &t, what); break;
    case DType::kUndefined: break;
  }
  return t;
}

}  // namespace kaiwu
