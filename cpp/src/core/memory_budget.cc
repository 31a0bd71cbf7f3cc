#include "core/memory_budget.h"

#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "kaiwu/status.h"

namespace kaiwu {

namespace {

thread_local uint64_t tls_budget = 0;  // 0: no scope open on this thread

// Physical memory, or the cgroup (v2, then v1) limit where that is lower.
uint64_t MachineMemory() {
  static const uint64_t bytes = [] {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t mem = pages > 0 && page > 0
                       ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page)
                       : (uint64_t{16} << 30);
    for (const char* path :
         {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
      std::ifstream f(path);
      std::string text;
      uint64_t limit = 0;
      if (f >> text && ParseByteCount(text, &limit) && limit > 0 && limit < mem) mem = limit;
    }
    return mem;
  }();
  return bytes;
}

}  // namespace

bool ParseByteCount(const std::string& text, uint64_t* bytes) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == 0) return false;
  const std::string number = text.substr(0, i);
  std::string unit = text.substr(i);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();  // "GB", "GiB", "B"
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();
  double scale = 1;
  if (unit == "K")
    scale = 1024.0;
  else if (unit == "M")
    scale = 1024.0 * 1024;
  else if (unit == "G")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "T")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty() && unit != "B")
    return false;
  char* end = nullptr;
  double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(value)) return false;
  value *= scale;
  if (value >= 18446744073709551615.0) {
    *bytes = UINT64_MAX;
    return true;
  }
  *bytes = static_cast<uint64_t>(value);
  return true;
}

uint64_t DefaultMemoryBudget() {
  const char* env = std::getenv("KAIWU_MEMORY_BUDGET");
  if (env && *env) {
    uint64_t bytes = 0;
    if (!ParseByteCount(env, &bytes) || bytes == 0)
      Fail(StatusCode::kInput, "KAIWU_MEMORY_BUDGET='", env,
           "' is not a positive byte count (e.g. 8G, 512M or 1073741824)");
    return bytes;
  }
  return MachineMemory();
}

uint64_t CurrentMemoryBudget() { return tls_budget ? tls_budget : DefaultMemoryBudget(); }

MemoryBudgetScope::MemoryBudgetScope(uint64_t bytes) : saved_(tls_budget) {
  tls_budget = bytes ? bytes : DefaultMemoryBudget();
}

MemoryBudgetScope::~MemoryBudgetScope() { tls_budget = saved_; }

bool TensorBytes(const Shape& shape, DType dtype, uint64_t* bytes) {
  uint64_t n = DTypeSize(dtype);
  bool zero = false;
  bool overflow = false;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (d == 0) zero = true;
    if (!overflow && d != 0 && n > UINT64_MAX / static_cast<uint64_t>(d)) overflow = true;
    if (!overflow) n *= static_cast<uint64_t>(d);
  }
  if (zero) {
    *bytes = 0;
    return true;
  }
  // Sizes past 2^63 cannot be indexed with int64 element counts either.
  if (overflow || n > static_cast<uint64_t>(INT64_MAX)) return false;
  *bytes = n;
  return true;
}

std::string FormatBytes(uint64_t bytes) {
  if (bytes == UINT64_MAX) return "more than 16 EiB";
  if (bytes < 1024) return std::to_string(bytes) + " B";
  static const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[u]);
  return buf;
}

std::string BudgetText(uint64_t budget) {
  return "the memory budget (" + FormatBytes(budget) +
         "; raise it with memory_budget= or $KAIWU_MEMORY_BUDGET)";
}

}  // namespace kaiwu
