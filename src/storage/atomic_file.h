#pragma once
// A small file (a manifest, a progress record, a checksum list) replaced
// whole or not at all: written to <path>.tmp, synced, renamed over <path>.
// A process killed at any moment leaves the old file or the new one, never
// a mix; a stale <path>.tmp is overwritten by the next write.
#include <filesystem>
#include <string_view>

namespace strata {

// Throws strata::Error "<path>: cannot write: ..." on any failure.
void write_file_atomically(const std::filesystem::path& path, std::string_view text);

}  // namespace strata
