#pragma once
// xxh3-64 checksums of blobs (libxxhash). `pack` records one per expert blob;
// a read can be verified as it lands (Extent::verify) or afterwards here.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace strata {

uint64_t xxh3_64(const void* data, size_t size);

// "0x0123456789abcdef"
std::string hash_hex(uint64_t h);

// "0123456789abcdef": how manifests and checksum lists write a checksum.
std::string hash_digits(uint64_t h);
// The inverse: nullopt unless exactly 16 lower-case hex digits.
std::optional<uint64_t> parse_hash_digits(std::string_view s);

// "<file> offset <N> length <L>: checksum mismatch (expected 0x…, got 0x…)"
std::string checksum_mismatch_message(std::string_view file, uint64_t offset, uint64_t length, uint64_t expected,
                                      uint64_t got);

// Hashes [data, data+size) and throws strata::Error with the message above
// when it differs from `expected`. `file` and `offset` only name the blob.
void verify_xxh3(const void* data, size_t size, uint64_t expected, std::string_view file, uint64_t offset);

}  // namespace strata
