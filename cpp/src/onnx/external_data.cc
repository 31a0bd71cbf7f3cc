#include "onnx/external_data.h"

#include <filesystem>
#include <fstream>
#include <system_error>

#include "kaiwu/status.h"

namespace kaiwu {

namespace fs = std::filesystem;
using kaiwu_onnx::TensorProto;

namespace {

// Resolves an external-data location, refusing anything outside base_dir.
fs::path ResolveExternal(const std::string& location, const std::string& base_dir,
                         const std::string& what) {
  if (base_dir.empty())
    Fail(StatusCode::kModel, "tensor '", what, "' stores its data in external file '", location,
         "', but the model was not loaded from a file path; load it by path so the file can be "
         "found next to it");
  if (location.find('\0') != std::string::npos)
    Fail(StatusCode::kModel, "tensor '", what, "': external data location contains a NUL byte");
  fs::path loc(location);
  if (loc.is_absolute())
    Fail(StatusCode::kModel, "tensor '", what, "': external data location '", location,
         "' is an absolute path; only paths inside the model's directory are allowed");
  for (const auto& part : loc)
    if (part == "..")
      Fail(StatusCode::kModel, "tensor '", what, "': external data location '", location,
           "' escapes the model's directory ('..' is not allowed)");
  std::error_code ec;
  fs::path base = fs::weakly_canonical(fs::path(base_dir), ec);
  fs::path full = ec ? fs::path() : fs::weakly_canonical(base / loc, ec);
  if (ec)
    Fail(StatusCode::kModel, "tensor '", what, "': external data location '", location,
         "' cannot be resolved: ", ec.message());
  auto rel = full.lexically_relative(base);
  if (rel.empty() || *rel.begin() == "..")
    Fail(StatusCode::kModel, "tensor '", what, "': external data location '", location,
         "' resolves outside the model's directory");
  return full;
}

// A non-negative decimal integer, or a ModelError naming the key.
uint64_t ParseCount(const std::string& text, const std::string& key, const std::string& what) {
  uint64_t v = 0;
  bool ok = !text.empty() && text.size() <= 19;
  for (char c : text) {
    if (c < '0' || c > '9') {
      ok = false;
      break;
    }
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (!ok)
    Fail(StatusCode::kModel, "tensor '", what, "': external data ", key, " '", text,
         "' is not a non-negative integer below 10^19");
  return v;
}

}  // namespace

ExternalData LocateExternalData(const TensorProto& proto, const std::string& base_dir,
                                const std::string& what, uint64_t bytes) {
  std::string location;
  uint64_t offset = 0;
  bool has_length = false;
  uint64_t length = 0;
  for (const auto& kv : proto.external_data()) {
    if (kv.key() == "location") location = kv.value();
    if (kv.key() == "offset") offset = ParseCount(kv.value(), "offset", what);
    if (kv.key() == "length") {
      length = ParseCount(kv.value(), "length", what);
      has_length = true;
    }
  }
  if (location.empty())
    Fail(StatusCode::kModel, "tensor '", what, "' has external data without a location");
  if (has_length && length != bytes)
    Fail(StatusCode::kModel, "tensor '", what, "': external data length ", length,
         " does not match its shape and dtype (", bytes, " bytes)");
  fs::path path = ResolveExternal(location, base_dir, what);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    Fail(StatusCode::kFileNotFound, "tensor '", what, "': external data file '", path.string(),
         "' cannot be opened");
  const uint64_t file_size = fs::file_size(path, ec);
  if (ec)
    Fail(StatusCode::kFileNotFound, "tensor '", what, "': external data file '", path.string(),
         "' cannot be opened: ", ec.message());
  if (offset > file_size || bytes > file_size - offset)
    Fail(StatusCode::kModel, "tensor '", what, "': external data file '", path.string(),
         "' is too short (wanted ", bytes, " bytes at offset ", offset, ", the file has ",
         file_size, ")");
  return ExternalData{path.string(), offset};
}

void ReadExternalData(const ExternalData& where, const std::string& what, uint64_t bytes,
                      void* out) {
  std::ifstream f(where.path, std::ios::binary);
  if (!f)
    Fail(StatusCode::kFileNotFound, "tensor '", what, "': external data file '", where.path,
         "' cannot be opened");
  f.seekg(static_cast<std::streamoff>(where.offset));
  f.read(static_cast<char*>(out), static_cast<std::streamsize>(bytes));
  if (static_cast<uint64_t>(f.gcount()) != bytes)
    Fail(StatusCode::kModel, "tensor '", what, "': external data file '", where.path,
         "' is too short (wanted ", bytes, " bytes at offset ", where.offset, ")");
}

}  // namespace kaiwu
