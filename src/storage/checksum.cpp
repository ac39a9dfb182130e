#include "storage/checksum.h"

#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>
#endif

#include <cstdio>

#include "util/error.h"

namespace strata {

// Debian's libxxhash ships the x86 run-time dispatcher (SSE2/AVX2/AVX-512):
// ~12 GB/s here against ~5 GB/s for the plain SSE2 entry point. The value is
// the same on every path.
uint64_t xxh3_64(const void* data, size_t size) {
#if defined(__x86_64__)
  return XXH3_64bits_dispatch(data, size);
#else
  return XXH3_64bits(data, size);
#endif
}

std::string hash_hex(uint64_t h) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string hash_digits(uint64_t h) { return hash_hex(h).substr(2); }

std::optional<uint64_t> parse_hash_digits(std::string_view s) {
  if (s.size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return std::nullopt;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  return v;
}

std::string checksum_mismatch_message(std::string_view file, uint64_t offset, uint64_t length, uint64_t expected,
                                      uint64_t got) {
  return std::string(file) + " offset " + std::to_string(offset) + " length " + std::to_string(length) +
         ": checksum mismatch (expected " + hash_hex(expected) + ", got " + hash_hex(got) + ")";
}

void verify_xxh3(const void* data, size_t size, uint64_t expected, std::string_view file, uint64_t offset) {
  uint64_t got = xxh3_64(data, size);
  if (got != expected) throw Error(checksum_mismatch_message(file, offset, size, expected, got));
}

}  // namespace strata
