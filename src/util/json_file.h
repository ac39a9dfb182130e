#pragma once
// Every JSON text strata reads from disk (config.json, tokenizer.json and its
// companions, a pack manifest, a safetensors header, heat and probe files)
// comes through here. nlohmann's parser is iterative, but copying, comparing
// and dumping a parsed value recurse once per level, so a file of a million
// brackets would overflow the stack somewhere downstream. The nesting is
// measured first (util/json_depth.h) and a text nested deeper than
// kMaxJsonFileDepth is refused with one error naming the file; real files
// nest a handful of levels.
//
// Errors are strata::Error "<what>: <problem>", the parser's message clipped
// (it echoes the offending token, which may be megabytes long).
#include <cstddef>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace strata {

// serde_json's default recursion limit, as for request bodies
// (server/openai_request.h).
inline constexpr std::size_t kMaxJsonFileDepth = 128;

// Throws when `text` nests deeper than kMaxJsonFileDepth; `what` names it.
void check_json_depth(std::string_view text, const std::string& what);

nlohmann::json parse_json(std::string_view text, const std::string& what);
nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& what);

// For files read on a best-effort basis (a cache, a resumable progress
// file): a discarded value (is_discarded()) when the text is not JSON or
// nests too deeply, instead of an exception.
nlohmann::json parse_json_or_discarded(std::string_view text);

// The whole file as bytes; throws naming it when it cannot be read.
std::string read_text_file(const std::filesystem::path& path);

// read_text_file + parse_json, errors naming the file.
nlohmann::json read_json_file(const std::filesystem::path& path);

// Whether a JSON integer fits int64_t (nlohmann keeps values past INT64_MAX
// as unsigned, and get<int64_t>() would wrap them negative); the value, or
// nullopt for anything else. Callers bound it further before narrowing.
std::optional<int64_t> json_int64(const nlohmann::json& v);

}  // namespace strata
