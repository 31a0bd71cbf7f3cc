// ONNX ModelProto bytes -> Graph IR.
#pragma once

#include <cstddef>
#include <string>

#include "ir/graph.h"

namespace kaiwu {

/// Parses and imports a model. `base_dir` is the directory of the model file,
/// used to resolve external-data files; empty means external data is refused.
/// Throws kModel for malformed models, kUnsupported (listing every unsupported
/// node at once) and kFileNotFound for missing external-data files.
Graph LoadOnnxModel(const void* bytes, size_t size, const std::string& base_dir);

/// Reads a whole file; throws kFileNotFound if it cannot be opened.
std::string ReadFileBytes(const std::string& path);

/// Oldest default-domain opset the importer accepts.
constexpr int kMinOpset = 13;

}  // namespace kaiwu
