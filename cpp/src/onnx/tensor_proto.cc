#include "onnx/tensor_proto.h"

#include <cstring>

#include "core/memory_budget.h"
#include "kaiwu/status.h"
#include "onnx/external_data.h"

namespace kaiwu {

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

// The number of values in the typed field that holds `dtype`'s data.
int64_t TypedCount(const TensorProto& proto, DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return proto.float_data_size();
    case DType::kFloat64: return proto.double_data_size();
    case DType::kInt64: return proto.int64_data_size();
    default: return proto.int32_data_size();
  }
}

template <typename Dst, typename Field>
void CopyField(const Field& field, Tensor* out) {
  Dst* dst = out->As<Dst>();
  for (int i = 0; i < field.size(); ++i) dst[i] = static_cast<Dst>(field.Get(i));
}

}  // namespace

Tensor TensorFromProto(const TensorProto& proto, const std::string& base_dir,
                       const std::string& what, uint64_t* budget_left) {
  DType dtype = DTypeFromOnnx(proto.data_type());
  if (dtype == DType::kUndefined)
    Fail(StatusCode::kUnsupported, "tensor '", what, "' has ONNX data type ", proto.data_type(),
         ", which kaiwu_infer does not support");
  Shape shape(proto.dims().begin(), proto.dims().end());
  for (int64_t d : shape)
    if (d < 0) Fail(StatusCode::kModel, "tensor '", what, "' has a negative dimension");
  // Every size the file declares is checked against what it holds, then against
  // the budget, before the tensor is allocated.
  uint64_t bytes = 0;
  if (!TensorBytes(shape, dtype, &bytes))
    Fail(StatusCode::kModel, "tensor '", what, "' declares shape ", ShapeToString(shape),
         ", whose size in bytes does not fit in 64 bits");
  const bool external = proto.data_location() == TensorProto::EXTERNAL;
  ExternalData where;
  if (external) {
    where = LocateExternalData(proto, base_dir, what, bytes);
  } else if (proto.has_raw_data()) {
    if (proto.raw_data().size() != bytes)
      Fail(StatusCode::kModel, "tensor '", what, "' has ", proto.raw_data().size(),
           " bytes of raw data but its shape ", ShapeToString(shape), " and dtype ",
           DTypeName(dtype), " need ", bytes);
  } else {
    const int64_t count = TypedCount(proto, dtype);
    const uint64_t elements = DTypeSize(dtype) ? bytes / DTypeSize(dtype) : 0;
    if (static_cast<uint64_t>(count) != elements)
      Fail(StatusCode::kModel, "tensor '", what, "' holds ", count, " values but its shape ",
           ShapeToString(shape), " needs ", elements);
  }
  if (budget_left) {
    if (bytes > *budget_left)
      Fail(StatusCode::kModel, "tensor '", what, "' (shape ", ShapeToString(shape), ", ",
           DTypeName(dtype), ", ", FormatBytes(bytes), ") does not fit in what is left of ",
           BudgetText(CurrentMemoryBudget()), " for the model's tensors (",
           FormatBytes(*budget_left), ")");
    *budget_left -= bytes;
  }

  Tensor t(dtype, shape);
  if (external) {
    ReadExternalData(where, what, bytes, t.data());
    return t;
  }
  if (proto.has_raw_data()) {
    std::memcpy(t.data(), proto.raw_data().data(), t.bytes());
    return t;
  }
  switch (dtype) {
    case DType::kFloat32: CopyField<float>(proto.float_data(), &t); break;
    case DType::kFloat64: CopyField<double>(proto.double_data(), &t); break;
    case DType::kInt64: CopyField<int64_t>(proto.int64_data(), &t); break;
    case DType::kInt32: CopyField<int32_t>(proto.int32_data(), &t); break;
    case DType::kInt16: CopyField<int16_t>(proto.int32_data(), &t); break;
    case DType::kInt8: CopyField<int8_t>(proto.int32_data(), &t); break;
    case DType::kUInt8: CopyField<uint8_t>(proto.int32_data(), &t); break;
    case DType::kBool: CopyField<bool>(proto.int32_data(), &t); break;
    case DType::kFloat16: CopyField<uint16_t>(proto.int32_data(), &t); break;
    case DType::kUndefined: break;
  }
  return t;
}

}  // namespace kaiwu
