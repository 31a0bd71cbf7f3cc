// Errors raised by the engine. Every failure carries a code that maps to one
// Python exception class, and a message naming the input, node or weight at fault.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace kaiwu {

/// What went wrong, coarsely; each code is one Python exception class.
enum class StatusCode {
  kOk = 0,
  kModel,        ///< malformed, truncated or inconsistent model (ModelError)
  kUnsupported,  ///< op types the engine cannot run (UnsupportedOpError)
  kFileNotFound, ///< a model or external-data file is missing (ModelFileNotFoundError)
  kInput,        ///< bad feeds: name, dtype, rank, dimension, layout (InputError)
  kRefit,        ///< a refit was refused; the session is unchanged (RefitError)
  kRuntime,      ///< a kernel found bad data while running, e.g. an index out of range
  kInternal,     ///< a bug in the engine
};

/// The exception every engine function throws. Kernels and planners throw it;
/// the Python bindings translate `code()` into the matching exception class.
class Error : public std::runtime_error {
 public:
  Error(StatusCode code, std::string message)
      : std::runtime_error(std::move(message)), code_(code) {}
  StatusCode code() const { return code_; }

 private:
  StatusCode code_;
};

namespace detail {
inline void StreamAll(std::ostringstream&) {}
template <typename T, typename... Rest>
void StreamAll(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  StreamAll(os, rest...);
}
}  // namespace detail

/// Builds a message from streamable pieces: Fail(StatusCode::kInput, "input '", n, "'...").
template <typename... Args>
[[noreturn]] void Fail(StatusCode code, const Args&... args) {
  std::ostringstream os;
  detail::StreamAll(os, args...);
  throw Error(code, os.str());
}

}  // namespace kaiwu

#define KAIWU_CHECK(cond, code, ...)            \
  do {                                          \
    if (!(cond)) ::kaiwu::Fail(code, __VA_ARGS__); \
  } while (0)
