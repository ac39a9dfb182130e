#pragma once
// Where strata keeps what it learns about this machine and its models (drive
// probe, the rates runs got from each drive, expert heat, the tuned profile,
// the demo model): $STRATA_HOME, else
// $XDG_CACHE_HOME/strata, else ~/.cache/strata (/tmp/strata without a home).
#include <cstdlib>
#include <filesystem>

namespace strata {

inline std::filesystem::path strata_cache_dir() {
  if (const char* s = std::getenv("STRATA_HOME"); s && *s) return s;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::filesystem::path(x) / "strata";
  if (const char* h = std::getenv("HOME"); h && *h) return std::filesystem::path(h) / ".cache" / "strata";
  return std::filesystem::temp_directory_path() / "strata";
}

}  // namespace strata
