#include "template/json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "template/error.h"
#include "template/text.h"

namespace strata::tmpl {

namespace {

template <class Json>
Value convert(const Json& j, int depth) {
  if (depth > kMaxValueDepth) render_error("context JSON nested more than " + std::to_string(kMaxValueDepth) + " deep");
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
      return Value::number(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float: return Value::number(j.template get<double>());
    case nlohmann::json::value_t::string: return Value::string(j.template get_ref<const std::string&>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(convert(e, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      DictObj d;
      for (auto it = j.begin(); it != j.end(); ++it) d.set(Value::string(it.key()), convert(it.value(), depth + 1));
      return Value::dict(std::move(d));
    }
    default: return Value::none();  // binary / discarded: not produced by parsing JSON text
  }
}

class Dumper {
 public:
  explicit Dumper(const JsonDumpOptions& o) : o_(o) {
    if (o.separators) {
      item_sep_ = o.separators->first;
      key_sep_ = o.separators->second;
    } else if (o.indent) {
      item_sep_ = ",";
    }
  }

  void dump(const Value& v, int level) {
    if (level > kMaxValueDepth) render_error("maximum recursion depth exceeded while encoding a JSON object");
    switch (v.type()) {
      case Value::Type::None: out_ += "null"; return;
      case Value::Type::Bool: out_ += v.as_bool() ? "true" : "false"; return;
      case Value::Type::Int: out_ += std::to_string(v.as_int()); return;
      case Value::Type::Float: out_ += float_str(v.as_float()); return;
      case Value::Type::String: string(v.str()); return;
      case Value::Type::List:
      case Value::Type::Tuple: {
        const auto& items = v.items();
        if (items.empty()) {
          out_ += "[]";
          return;
        }
        out_ += '[';
        const std::string nl = newline(level + 1);
        out_ += nl;
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (i) {
            out_ += item_sep_;
            out_ += nl;
          }
          dump(items[i], level + 1);
        }
        out_ += newline(level);
        out_ += ']';
        return;
      }
      case Value::Type::Dict: {
        std::vector<const std::pair<Value, Value>*> items;
        for (const auto& kv : v.dict().items()) items.push_back(&kv);
        if (items.empty()) {
          out_ += "{}";
          return;
        }
        if (o_.sort_keys)
          std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return less(a->first, b->first); });
        out_ += '{';
        const std::string nl = newline(level + 1);
        out_ += nl;
        bool first = true;
        for (const auto* kv : items) {
          if (!first) {
            out_ += item_sep_;
            out_ += nl;
          }
          first = false;
          key(kv->first);
          out_ += key_sep_;
          dump(kv->second, level + 1);
        }
        out_ += newline(level);
        out_ += '}';
        return;
      }
      default:
        render_error("Object of type " + type_name(v) + " is not JSON serializable");
    }
  }

  std::string take() { return std::move(out_); }

 private:
  std::string newline(int level) const {
    if (!o_.indent) return {};
    std::string s = "\n";
    for (int i = 0; i < level; ++i) s += *o_.indent;
    return s;
  }

  static std::string float_str(double d) {
    if (std::isnan(d)) return "NaN";
    if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
    return text::float_repr(d);
  }

  void key(const Value& k) {
    switch (k.type()) {
      case Value::Type::String: string(k.str()); return;
      case Value::Type::Float: string(float_str(k.as_float())); return;
      case Value::Type::Bool: string(k.as_bool() ? "true" : "false"); return;
      case Value::Type::Int: string(std::to_string(k.as_int())); return;
      case Value::Type::None: string("null"); return;
      default: render_error("keys must be str, int, float, bool or None, not " + type_name(k));
    }
  }

  void string(const std::string& s) {
    out_ += '"';
    char buf[16];
    for (std::size_t i = 0; i < s.size();) {
      const std::size_t start = i;
      const char32_t c = text::next(s, i);
      switch (c) {
        case '"': out_ += "\\\""; continue;
        case '\\': out_ += "\\\\"; continue;
        case '\n': out_ += "\\n"; continue;
        case '\r': out_ += "\\r"; continue;
        case '\t': out_ += "\\t"; continue;
        case '\b': out_ += "\\b"; continue;
        case '\f': out_ += "\\f"; continue;
        default: break;
      }
      if (c < 0x20 || (o_.ensure_ascii && c >= 0x7F && c < text::kRawByteBase)) {
        if (c >= 0x10000) {
          const char32_t v = c - 0x10000;
          std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 | (v >> 10)),
                        static_cast<unsigned>(0xDC00 | (v & 0x3FF)));
        } else {
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
        }
        out_ += buf;
      } else {
        out_.append(s, start, i - start);
      }
    }
    out_ += '"';
  }

  const JsonDumpOptions& o_;
  std::string item_sep_ = ", ";
  std::string key_sep_ = ": ";
  std::string out_;
};

}  // namespace

Value from_json(const nlohmann::json& j) { return convert(j, 0); }
Value from_json(const nlohmann::ordered_json& j) { return convert(j, 0); }

std::string json_dumps(const Value& v, const JsonDumpOptions& options) {
  Dumper d(options);
  d.dump(v, 0);
  return d.take();
}

}  // namespace strata::tmpl
