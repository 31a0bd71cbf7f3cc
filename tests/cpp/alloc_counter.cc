// The test binary's global operator new: malloc, counted per thread
// (alloc_counter.h). Every unaligned form is replaced, so that no allocation
// of one runtime meets a free of the other (ASan checks the pairs); the
// aligned forms keep the library's own, pairs of their own.
#include "alloc_counter.h"

#include <cstdlib>
#include <new>

namespace {
thread_local int64_t g_allocations = 0;

void* Allocate(std::size_t n) {
  ++g_allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
}  // namespace

namespace kaiwu {
int64_t ThreadAllocations() { return g_allocations; }
}  // namespace kaiwu

void* operator new(std::size_t n) { return Allocate(n); }
void* operator new[](std::size_t n) { return Allocate(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  ++g_allocations;
  return std::malloc(n == 0 ? 1 : n);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
