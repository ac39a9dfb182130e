#pragma once
// Reading the JSON files that come with a checkpoint's tokenizer.
#include <filesystem>
#include <nlohmann/json.hpp>

namespace strata::tok {

// Parses `path`; throws strata::Error naming the file on I/O or syntax errors.
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace strata::tok
