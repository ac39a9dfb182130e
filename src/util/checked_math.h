#pragma once
// Sizes computed from what a file says (a manifest's dimensions, a header's
// lengths) are multiplied and added here: a result that does not fit is an
// error naming `what`, never a wrapped small number that passes a bounds
// check and then reads or writes past the end.
#include <cstdint>
#include <string>
#include <string_view>

#include "util/error.h"

namespace strata {

// a · b, or strata::Error "<what>: size overflows".
inline uint64_t checked_mul(uint64_t a, uint64_t b, std::string_view what) {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw Error(std::string(what) + ": size overflows");
  return r;
}

// a + b, or strata::Error "<what>: size overflows".
inline uint64_t checked_add(uint64_t a, uint64_t b, std::string_view what) {
  uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw Error(std::string(what) + ": size overflows");
  return r;
}

}  // namespace strata
