// External tensor data: a TensorProto whose bytes live in a file next to the
// model, at (location, offset, length). Everything the proto says is checked
// against the file before a byte is read.
#pragma once

#include <cstdint>
#include <string>

#include "onnx.pb.h"

namespace kaiwu {

/// Where one tensor's external data lies, checked: the file exists inside the
/// model's directory and holds `bytes` bytes at `offset`.
struct ExternalData {
  std::string path;  ///< resolved, inside the model's directory
  uint64_t offset = 0;
};

/// Resolves and checks the external data of `proto` (named `what` in errors),
/// which needs `bytes` bytes. Throws kModel for a malformed entry (a location
/// outside `base_dir`, a non-numeric or negative offset or length, a length
/// other than `bytes`, a file too short) and kFileNotFound for a missing file.
ExternalData LocateExternalData(const kaiwu_onnx::TensorProto& proto, const std::string& base_dir,
                                const std::string& what, uint64_t bytes);

/// Reads `bytes` bytes from a checked location into `out`.
void ReadExternalData(const ExternalData& where, const std::string& what, uint64_t bytes,
                      void* out);

}  // namespace kaiwu
