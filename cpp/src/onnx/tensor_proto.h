// TensorProto -> Tensor, with external data resolved under the model's directory.
#pragma once

#include <string>

#include "kaiwu/tensor.h"
#include "onnx.pb.h"

namespace kaiwu {

/// Maps an ONNX TensorProto.DataType code; kUndefined for types the engine lacks.
DType DTypeFromOnnx(int32_t code);

/// Copies a TensorProto's data (raw, typed fields or external file) into a Tensor.
/// `what` names the tensor in error messages.
Tensor TensorFromProto(const kaiwu_onnx::TensorProto& proto, const std::string& base_dir,
                       const std::string& what);

}  // namespace kaiwu
