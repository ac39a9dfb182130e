#pragma once
// What every fuzz target shares. The readers under test take paths, so each
// input is written to a file in a scratch directory of this process's own
// (on /dev/shm when there is one). A target runs the reader and accepts
// exactly one outcome besides success: strata::Error, the one clear error
// line bad input must give. Anything else (another exception, a crash, a
// sanitizer report, a hang past -timeout, memory past -rss_limit_mb) is a
// finding.
//
// Several files in one input: seeds separate them with kPartMarker, so a
// mutation can reach each file (tokenizer.json and its tokenizer_config.json).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

#include "util/error.h"

namespace strata::fuzz {

inline constexpr std::string_view kPartMarker = "\n#---8<---\n";

// This process's scratch directory, created on first use (libFuzzer's
// -fork / -jobs workers are processes, so no two share one).
const std::filesystem::path& scratch_dir();

void write_file(const std::filesystem::path& path, std::string_view bytes);

// `data` cut at kPartMarker into at most `n` parts (the last keeps any
// further markers); missing parts are absent from the result.
std::vector<std::string_view> split_parts(std::string_view data, std::size_t n);

// Runs `f`; strata::Error is the expected answer to bad input.
template <class F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const Error&) {
  }
}

inline std::string_view as_text(const uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace strata::fuzz
