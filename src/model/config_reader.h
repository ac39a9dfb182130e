#pragma once
// Typed, checked access to a Hugging Face config.json, shared by ModelConfig's
// common fields and each architecture's own (ArchSpec::hf). Every failure is
// one strata::Error "<source>: <what>".
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace strata {

class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& j, const std::string& source) : j_(j), source_(source) {}

  const std::string& source() const { return source_; }
  const nlohmann::json& json() const { return j_; }
  [[noreturn]] void fail(const std::string& what) const { throw Error(source_ + ": " + what); }

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      fail(std::string("missing required field '") + key + "'");
    }
    const nlohmann::json& v = j_.at(key);
    if (!v.is_number_integer()) fail(std::string("field '") + key + "' must be an integer");
    return v.get<int64_t>();
  }

  std::optional<int64_t> optional_integer(const char* key) const {
    if (!has(key)) return std::nullopt;
    return integer(key);
  }

  double number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = j_.at(key);
    if (!v.is_number()) fail(std::string("field '") + key + "' must be a number");
    return v.get<double>();
  }

  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = j_.at(key);
    if (!v.is_boolean()) fail(std::string("field '") + key + "' must be true or false");
    return v.get<bool>();
  }

  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = j_.at(key);
    if (!v.is_string()) fail(std::string("field '") + key + "' must be a string");
    return v.get<std::string>();
  }

 private:
  const nlohmann::json& j_;
  std::string source_;
};

// Validation helpers: "inconsistent config: <what>".
inline void require(bool ok, const ConfigReader& r, const std::string& what) {
  if (!ok) r.fail("inconsistent config: " + what);
}
inline void require_positive(int64_t v, const ConfigReader& r, const char* name) {
  require(v > 0, r, std::string(name) + " must be positive (got " + std::to_string(v) + ")");
}

}  // namespace strata
