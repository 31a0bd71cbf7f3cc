// TensorProto -> Tensor, with external data resolved under the model's directory.
#pragma once

#include <cstdint>
#include <string>

#include "kaiwu/tensor.h"
#include "onnx.pb.h"

namespace kaiwu {

/// Maps an ONNX TensorProto.DataType code; kUndefined for types the engine lacks.
DType DTypeFromOnnx(int32_t code);

/// Copies a TensorProto's data (raw, typed fields or external file) into a Tensor.
/// `what` names the tensor in error messages. Before anything is allocated, the
/// declared dims are checked against the data the proto (or its external file)
/// holds, and the tensor's bytes against `*budget_left` (when given), which is
/// then reduced by them: one budget for all the tensors of a model. Throws kModel.
Tensor TensorFromProto(const kaiwu_onnx::TensorProto& proto, const std::string& base_dir,
                       const std::string& what, uint64_t* budget_left = nullptr);

}  // namespace kaiwu
