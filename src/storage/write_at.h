#pragma once
// Writing every byte of a buffer at a file offset (pwrite until done,
// EINTR retried), for the downloads that land pieces of a file in place.
#include <cstdint>
#include <filesystem>
#include <span>

namespace strata {

// Throws strata::Error "<shown>: cannot write: ..." on failure.
void write_all_at(int fd, std::span<const uint8_t> bytes, uint64_t at, const std::filesystem::path& shown);

}  // namespace strata
