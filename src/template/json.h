#pragma once
// Between nlohmann::json and template Values: the render context in, and
// Python's json.dumps out (what transformers' `tojson` filter calls, with
// its ensure_ascii / indent / separators / sort_keys options).
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "template/value.h"

namespace strata::tmpl {

// Objects keep their key order (nlohmann::json has already sorted them;
// ordered_json keeps the order of the document, as Python's json does).
Value from_json(const nlohmann::json& j);
Value from_json(const nlohmann::ordered_json& j);

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // None: one line
  std::optional<std::pair<std::string, std::string>> separators;  // (item, key); default as Python
  bool sort_keys = false;
};

// json.dumps(v, ...). TypeError for values JSON cannot hold (Undefined,
// namespaces, callables), as Python raises.
std::string json_dumps(const Value& v, const JsonDumpOptions& options);

}  // namespace strata::tmpl
