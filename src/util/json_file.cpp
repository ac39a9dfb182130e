#include "util/json_file.h"

#include <fstream>
#include <limits>
#include <sstream>

#include "util/error.h"
#include "util/json_depth.h"

namespace strata {

namespace {

std::string clipped(std::string s) {
  constexpr std::size_t kMax = 300;
  if (s.size() > kMax) s = s.substr(0, kMax) + "...";
  return s;
}

template <class Json>
Json parse_checked(std::string_view text, const std::string& what) {
  check_json_depth(text, what);
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throw Error(what + ": invalid JSON: " + clipped(e.what()));
  }
}

}  // namespace

void check_json_depth(std::string_view text, const std::string& what) {
  if (json_nesting_depth(text, kMaxJsonFileDepth) > kMaxJsonFileDepth)
    throw Error(what + ": JSON nested more than " + std::to_string(kMaxJsonFileDepth) +
                " levels deep (damaged or not a real file)");
}

nlohmann::json parse_json(std::string_view text, const std::string& what) {
  return parse_checked<nlohmann::json>(text, what);
}

nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& what) {
  return parse_checked<nlohmann::ordered_json>(text, what);
}

nlohmann::json parse_json_or_discarded(std::string_view text) {
  if (json_nesting_depth(text, kMaxJsonFileDepth) > kMaxJsonFileDepth)
    return nlohmann::json(nlohmann::json::value_t::discarded);
  return nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error("error reading " + path.string());
  return std::move(ss).str();
}

nlohmann::json read_json_file(const std::filesystem::path& path) { return parse_json(read_text_file(path), path.string()); }

std::optional<int64_t> json_int64(const nlohmann::json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return std::nullopt;
}

}  // namespace strata
