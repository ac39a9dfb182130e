#pragma once
// Reading file ranges into the page cache ahead of use: a model's resident
// weights are mapped, and without this the first steps would fault them in a
// page at a time. Read with pread through a small buffer of our own, the
// bytes land in the page cache and not in this process's resident set: the
// mapping then finds them there.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace strata {

struct FileRange {
  std::string path;
  uint64_t offset = 0;
  uint64_t length = 0;
};

// Overlapping and touching ranges of a file are read once. `on_bytes` is
// called as each piece arrives. The files are read without read-ahead past
// the ranges (experts between trunk tensors stay out of the page cache).
// Throws strata::Error naming the file on a read error. Returns the bytes read.
uint64_t read_into_page_cache(std::vector<FileRange> ranges, const std::function<void(uint64_t)>& on_bytes = {});

// Bytes the ranges cover once merged.
uint64_t covered_bytes(std::vector<FileRange> ranges);

}  // namespace strata
