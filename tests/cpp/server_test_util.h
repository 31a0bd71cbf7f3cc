// Helpers shared by the server unit tests: checking an error's code and
// message, and random bytes of any dtype.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kaiwu/status.h"

namespace kaiwu {
namespace testing {

/// Runs `fn`, expecting an Error with `code` whose message contains `part`.
inline void ExpectErrorContaining(const std::function<void()>& fn, StatusCode code,
                                  const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

/// `n` random bytes, none of them zero (so copies are told from zero fill).
inline std::vector<uint8_t> RandomBytes(size_t n, std::mt19937* rng) {
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(1 + (*rng)() % 255);
  return b;
}

}  // namespace testing
}  // namespace kaiwu
