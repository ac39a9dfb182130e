#pragma once
// The reference fixture models (tests/fixtures/models/*/, each made by a
// script under tools/ from transformers or an independent reference), for
// tests that run every one of them.
#include <algorithm>
#include <filesystem>
#include <vector>

namespace strata {

inline std::filesystem::path fixture_models_dir() { return std::filesystem::path(STRATA_FIXTURES_DIR) / "models"; }

// Every fixture model directory (one with a config.json), sorted.
inline std::vector<std::filesystem::path> fixture_model_dirs() {
  std::vector<std::filesystem::path> dirs;
  for (const auto& e : std::filesystem::directory_iterator(fixture_models_dir()))
    if (std::filesystem::exists(e.path() / "config.json")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

}  // namespace strata
