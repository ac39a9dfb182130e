// Python methods of str, dict, list and tuple as templates call them
// ("x".strip(), msg.get("content"), d.items(), l.index(v), ...), with the
// rules of jinja2's ImmutableSandboxedEnvironment: methods that modify a
// dict, or list.append / extend / insert / remove / reverse / sort, are
// unsafe (calling them raises SecurityError); list.pop and list.clear pass.
// Methods of a Markup (safe) string escape their string arguments and return
// Markup, as markupsafe does.
#include <algorithm>

#include "template/builtins.h"
#include "template/error.h"
#include "template/format.h"
#include "template/interpreter.h"
#include "template/text.h"

namespace strata::tmpl {

namespace {

using Method = Value (*)(Interpreter&, const Value& self, CallArgs& args);

int64_t int_arg(const Value& v) {
  if (v.is_integral()) return v.as_int();
  if (v.is_undefined()) undefined_error(v);
  render_error("'" + type_name(v) + "' object cannot be interpreted as an integer");
}

const std::string& str_arg(const Value& v, const char* method) {
  if (v.is_string()) return v.str();
  if (v.is_undefined()) undefined_error(v);
  render_error(std::string(method) + "() argument must be str, not " + type_name(v));
}

std::optional<std::string> opt_str(const Value& v, const char* method) {
  if (v.is_none()) return std::nullopt;
  return str_arg(v, method);
}

// s[start:end] of a str in code points, for the start/end arguments of
// find / count / startswith.
std::string sub_range(const std::string& s, const Value& start, const Value& end, int64_t* offset = nullptr) {
  if (start.is_none() && end.is_none()) {
    if (offset) *offset = 0;
    return s;
  }
  const std::u32string cps = text::decode(s);
  const auto n = static_cast<int64_t>(cps.size());
  auto clamp = [n](int64_t i) { return i < 0 ? std::max<int64_t>(i + n, 0) : std::min(i, n); };
  const int64_t b = start.is_none() ? 0 : clamp(int_arg(start));
  const int64_t e = end.is_none() ? n : clamp(int_arg(end));
  if (offset) *offset = b;
  if (e <= b) return {};
  return text::encode(std::u32string_view(cps).substr(static_cast<std::size_t>(b), static_cast<std::size_t>(e - b)));
}

Value str_list(const std::vector<std::string>& parts, bool safe) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (const std::string& p : parts) out.push_back(Value::string(p, safe));
  return Value::list(std::move(out));
}

// ------------------------------------------------------------ str

Value m_startswith_impl(const Value& self, CallArgs& a, bool ends) {
  const char* name = ends ? "endswith" : "startswith";
  const auto p = bind_args(name, a, {{"prefix", {}}, {"start", Value::none()}, {"end", Value::none()}});
  const std::string s = sub_range(self.str(), p[1], p[2]);
  std::vector<Value> candidates = p[0].is_tuple() ? p[0].items() : std::vector<Value>{p[0]};
  if (!p[0].is_tuple() && !p[0].is_string())
    render_error(std::string(name) + " first arg must be str or a tuple of str, not " + type_name(p[0]));
  for (const Value& c : candidates) {
    if (!c.is_string()) render_error(std::string("tuple for ") + name + " must only contain str, not " + type_name(c));
    const std::string& x = c.str();
    if (x.size() <= s.size() && (ends ? s.compare(s.size() - x.size(), x.size(), x) == 0 : s.compare(0, x.size(), x) == 0))
      return Value::boolean(true);
  }
  return Value::boolean(false);
}
Value m_startswith(Interpreter&, const Value& self, CallArgs& a) { return m_startswith_impl(self, a, false); }
Value m_endswith(Interpreter&, const Value& self, CallArgs& a) { return m_startswith_impl(self, a, true); }

Value strip_impl(const Value& self, CallArgs& a, const char* name, bool left, bool right) {
  const auto p = bind_args(name, a, {{"chars", Value::none()}});
  return Value::string(text::strip(self.str(), opt_str(p[0], name), left, right), self.safe());
}
Value m_strip(Interpreter&, const Value& self, CallArgs& a) { return strip_impl(self, a, "strip", true, true); }
Value m_lstrip(Interpreter&, const Value& self, CallArgs& a) { return strip_impl(self, a, "lstrip", true, false); }
Value m_rstrip(Interpreter&, const Value& self, CallArgs& a) { return strip_impl(self, a, "rstrip", false, true); }

Value split_impl(const Value& self, CallArgs& a, bool reverse) {
  const char* name = reverse ? "rsplit" : "split";
  const auto p = bind_args(name, a, {{"sep", Value::none()}, {"maxsplit", Value::integer(-1)}});
  const std::optional<std::string> sep = opt_str(p[0], name);
  if (sep && sep->empty()) render_error("empty separator");
  const int64_t maxsplit = int_arg(p[1]);
  return str_list(reverse ? text::rsplit(self.str(), sep, maxsplit) : text::split(self.str(), sep, maxsplit), self.safe());
}
Value m_split(Interpreter&, const Value& self, CallArgs& a) { return split_impl(self, a, false); }
Value m_rsplit(Interpreter&, const Value& self, CallArgs& a) { return split_impl(self, a, true); }

Value m_splitlines(Interpreter&, const Value& self, CallArgs& a) {
  const auto p = bind_args("splitlines", a, {{"keepends", Value::boolean(false)}});
  return str_list(text::splitlines(self.str(), truthy(p[0])), self.safe());
}

Value m_replace(Interpreter& in, const Value& self, CallArgs& a) {
  const auto p = bind_args("replace", a, {{"old", {}}, {"new", {}}, {"count", Value::integer(-1)}});
  std::string out = text::replace(self.str(), str_arg(p[0], "replace"), str_arg(p[1], "replace"), int_arg(p[2]));
  in.check_size(out.size());
  return Value::string(std::move(out), self.safe());
}

#define STRATA_STR_MAP(fn, impl)                                   \
  Value fn(Interpreter&, const Value& self, CallArgs& a) {         \
    bind_args(#impl, a, {});                                       \
    return Value::string(text::impl(self.str()), self.safe());     \
  }
STRATA_STR_MAP(m_upper, upper)
STRATA_STR_MAP(m_lower, lower)
STRATA_STR_MAP(m_casefold, lower)
STRATA_STR_MAP(m_title, title)
STRATA_STR_MAP(m_capitalize, capitalize)
STRATA_STR_MAP(m_swapcase, swapcase)
#undef STRATA_STR_MAP

template <class Pred>
Value all_chars(const Value& self, CallArgs& a, const char* name, Pred pred) {
  bind_args(name, a, {});
  const std::string& s = self.str();
  if (s.empty()) return Value::boolean(false);
  for (std::size_t i = 0; i < s.size();)
    if (!pred(text::next(s, i))) return Value::boolean(false);
  return Value::boolean(true);
}
Value m_isdigit(Interpreter&, const Value& self, CallArgs& a) { return all_chars(self, a, "isdigit", text::is_digit); }
Value m_isalpha(Interpreter&, const Value& self, CallArgs& a) { return all_chars(self, a, "isalpha", text::is_alpha); }
Value m_isalnum(Interpreter&, const Value& self, CallArgs& a) { return all_chars(self, a, "isalnum", text::is_alnum); }
Value m_isspace(Interpreter&, const Value& self, CallArgs& a) { return all_chars(self, a, "isspace", text::is_space); }
Value m_isupper(Interpreter&, const Value& self, CallArgs& a) {
  bind_args("isupper", a, {});
  return Value::boolean(text::str_isupper(self.str()));
}
Value m_islower(Interpreter&, const Value& self, CallArgs& a) {
  bind_args("islower", a, {});
  return Value::boolean(text::str_islower(self.str()));
}

Value find_impl(const Value& self, CallArgs& a, const char* name, bool reverse, bool raise) {
  const auto p = bind_args(name, a, {{"sub", {}}, {"start", Value::none()}, {"end", Value::none()}});
  int64_t offset = 0;
  const std::string s = sub_range(self.str(), p[1], p[2], &offset);
  const std::string& sub = str_arg(p[0], name);
  const int64_t i = reverse ? text::rfind(s, sub) : text::find(s, sub);
  if (i < 0) {
    if (raise) render_error("substring not found");
    return Value::integer(-1);
  }
  return Value::integer(i + offset);
}
Value m_find(Interpreter&, const Value& self, CallArgs& a) { return find_impl(self, a, "find", false, false); }
Value m_rfind(Interpreter&, const Value& self, CallArgs& a) { return find_impl(self, a, "rfind", true, false); }
Value m_index(Interpreter&, const Value& self, CallArgs& a) { return find_impl(self, a, "index", false, true); }
Value m_rindex(Interpreter&, const Value& self, CallArgs& a) { return find_impl(self, a, "rindex", true, true); }

Value m_count(Interpreter&, const Value& self, CallArgs& a) {
  const auto p = bind_args("count", a, {{"sub", {}}, {"start", Value::none()}, {"end", Value::none()}});
  return Value::integer(text::count(sub_range(self.str(), p[1], p[2]), str_arg(p[0], "count")));
}

Value m_join(Interpreter& in, const Value& self, CallArgs& a) {
  const auto p = bind_args("join", a, {{"iterable", {}}});
  std::string out;
  std::size_t i = 0;
  for (const Value& item : iterate(in, p[0])) {
    if (!item.is_string())
      render_error("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(item) + " found");
    if (i++) out += self.str();
    out += self.safe() && !item.safe() ? text::html_escape(item.str()) : item.str();
    in.check_size(out.size());
  }
  return Value::string(std::move(out), self.safe());
}

Value m_format(Interpreter& in, const Value& self, CallArgs& a) {
  return Value::string(str_format(in, self, a), self.safe());
}

Value justify(Interpreter& in, const Value& self, CallArgs& a, const char* name, char how) {
  const auto p = bind_args(name, a, {{"width", {}}, {"fillchar", Value::string(" ")}});
  const int64_t width = int_arg(p[0]);
  const std::string& fill = str_arg(p[1], name);
  if (text::length(fill) != 1) render_error("The fill character must be exactly one character long");
  const std::string& s = self.str();
  const auto len = static_cast<int64_t>(text::length(s));
  if (width <= len) return self;
  in.check_size(static_cast<std::size_t>(width) * fill.size());
  const int64_t marg = width - len;
  int64_t left = 0;
  if (how == '>') left = marg;
  else if (how == '^') left = marg / 2 + (marg & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < marg - left; ++i) out += fill;
  return Value::string(std::move(out), self.safe());
}
Value m_center(Interpreter& in, const Value& self, CallArgs& a) { return justify(in, self, a, "center", '^'); }
Value m_ljust(Interpreter& in, const Value& self, CallArgs& a) { return justify(in, self, a, "ljust", '<'); }
Value m_rjust(Interpreter& in, const Value& self, CallArgs& a) { return justify(in, self, a, "rjust", '>'); }

Value m_zfill(Interpreter& in, const Value& self, CallArgs& a) {
  const auto p = bind_args("zfill", a, {{"width", {}}});
  const int64_t width = int_arg(p[0]);
  const std::string& s = self.str();
  const auto len = static_cast<int64_t>(text::length(s));
  if (width <= len) return self;
  in.check_size(static_cast<std::size_t>(width));
  const std::size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
  return Value::string(s.substr(0, sign) + std::string(static_cast<std::size_t>(width - len), '0') + s.substr(sign),
                       self.safe());
}

Value partition_impl(const Value& self, CallArgs& a, bool reverse) {
  const char* name = reverse ? "rpartition" : "partition";
  const std::string& sep = str_arg(bind_args(name, a, {{"sep", {}}})[0], name);
  if (sep.empty()) render_error("empty separator");
  const std::string& s = self.str();
  const std::size_t f = reverse ? s.rfind(sep) : s.find(sep);
  const bool safe = self.safe();
  if (f == std::string::npos) {
    if (reverse) return Value::tuple({Value::string("", safe), Value::string("", safe), self});
    return Value::tuple({self, Value::string("", safe), Value::string("", safe)});
  }
  return Value::tuple({Value::string(s.substr(0, f), safe), Value::string(sep, safe),
                       Value::string(s.substr(f + sep.size()), safe)});
}
Value m_partition(Interpreter&, const Value& self, CallArgs& a) { return partition_impl(self, a, false); }
Value m_rpartition(Interpreter&, const Value& self, CallArgs& a) { return partition_impl(self, a, true); }

Value m_removeprefix(Interpreter&, const Value& self, CallArgs& a) {
  const std::string& x = str_arg(bind_args("removeprefix", a, {{"prefix", {}}})[0], "removeprefix");
  const std::string& s = self.str();
  if (s.compare(0, x.size(), x) == 0 && x.size() <= s.size()) return Value::string(s.substr(x.size()), self.safe());
  return self;
}

Value m_removesuffix(Interpreter&, const Value& self, CallArgs& a) {
  const std::string& x = str_arg(bind_args("removesuffix", a, {{"suffix", {}}})[0], "removesuffix");
  const std::string& s = self.str();
  if (!x.empty() && x.size() <= s.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)
    return Value::string(s.substr(0, s.size() - x.size()), self.safe());
  return self;
}

// ------------------------------------------------------------ dict

// dict.keys() / .values() / .items(): live views with len(), iteration,
// membership and reversed(), printed as dict_keys([...]); not subscriptable
// and not JSON serializable.
class DictView : public Object {
 public:
  enum class Kind { Keys, Values, Items };
  DictView(Value dict, Kind kind) : dict_(std::move(dict)), kind_(kind) {}
  std::string type_name() const override {
    return kind_ == Kind::Keys ? "dict_keys" : kind_ == Kind::Values ? "dict_values" : "dict_items";
  }
  std::string repr() const override { return type_name() + "(" + tmpl::repr(Value::list(items())) + ")"; }
  bool truthy() const override { return dict_.dict().size() != 0; }
  std::optional<int64_t> size() const override { return static_cast<int64_t>(dict_.dict().size()); }
  bool iterable() const override { return true; }
  bool reversible() const override { return true; }
  std::vector<Value> iterate(Interpreter&) override { return items(); }
  bool contains(Interpreter& in, const Value& item) override {
    if (kind_ == Kind::Keys) {
      check_hashable(item);
      return dict_.dict().find(item) != nullptr;
    }
    return Object::contains(in, item);
  }

 private:
  std::vector<Value> items() const {
    std::vector<Value> out;
    for (const auto& [k, v] : dict_.dict().items())
      out.push_back(kind_ == Kind::Keys ? k : kind_ == Kind::Values ? v : Value::tuple({k, v}));
    return out;
  }
  Value dict_;
  Kind kind_;
};

Value dict_view(const Value& self, DictView::Kind kind) { return Value::object(std::make_shared<DictView>(self, kind)); }

Value m_get(Interpreter&, const Value& self, CallArgs& a) {
  const auto p = bind_args("get", a, {{"key", {}}, {"default", Value::none()}});
  check_hashable(p[0]);
  const Value* v = self.dict().find(p[0]);
  return v ? *v : p[1];
}

Value m_items(Interpreter&, const Value& self, CallArgs& a) {
  bind_args("items", a, {});
  return dict_view(self, DictView::Kind::Items);
}

Value m_keys(Interpreter&, const Value& self, CallArgs& a) {
  bind_args("keys", a, {});
  return dict_view(self, DictView::Kind::Keys);
}

Value m_values(Interpreter&, const Value& self, CallArgs& a) {
  bind_args("values", a, {});
  return dict_view(self, DictView::Kind::Values);
}

Value m_dict_copy(Interpreter&, const Value& self, CallArgs& a) {
  bind_args("copy", a, {});
  return Value::dict(self.dict());
}

// ------------------------------------------------------------ list / tuple

Value m_seq_index(Interpreter&, const Value& self, CallArgs& a) {
  const auto p = bind_args("index", a, {{"value", {}}, {"start", Value::integer(0)}, {"stop", Value::none()}});
  const auto& items = self.items();
  const auto n = static_cast<int64_t>(items.size());
  auto clamp = [n](int64_t i) { return i < 0 ? std::max<int64_t>(i + n, 0) : std::min(i, n); };
  const int64_t b = clamp(int_arg(p[1]));
  const int64_t e = p[2].is_none() ? n : clamp(int_arg(p[2]));
  for (int64_t i = b; i < e; ++i)
    if (equals(items[static_cast<std::size_t>(i)], p[0])) return Value::integer(i);
  render_error(repr(p[0]) + " is not in " + type_name(self));
}

Value m_seq_count(Interpreter&, const Value& self, CallArgs& a) {
  const Value x = bind_args("count", a, {{"value", {}}})[0];
  int64_t n = 0;
  for (const Value& item : self.items())
    if (equals(item, x)) ++n;
  return Value::integer(n);
}

Value m_list_copy(Interpreter&, const Value& self, CallArgs& a) {
  bind_args("copy", a, {});
  return Value::list(self.items());
}

Value m_list_pop(Interpreter&, const Value& self, CallArgs& a) {
  const auto p = bind_args("pop", a, {{"index", Value::integer(-1)}});
  std::vector<Value>& items = self.list_items();
  if (items.empty()) render_error("pop from empty list");
  int64_t i = int_arg(p[0]);
  if (i < 0) i += static_cast<int64_t>(items.size());
  if (i < 0 || i >= static_cast<int64_t>(items.size())) render_error("pop index out of range");
  Value v = std::move(items[static_cast<std::size_t>(i)]);
  items.erase(items.begin() + i);
  return v;
}

Value m_list_clear(Interpreter&, const Value& self, CallArgs& a) {
  bind_args("clear", a, {});
  self.list_items().clear();
  return Value::none();
}

struct MethodDef {
  const char* name;
  Method fn;
  bool markup_wrapped;  // markupsafe escapes the arguments and returns Markup
};

const MethodDef kStrMethods[] = {
    {"capitalize", m_capitalize, true}, {"casefold", m_casefold, false},
    {"center", m_center, true},         {"count", m_count, false},
    {"endswith", m_endswith, false},    {"find", m_find, false},
    {"format", m_format, false},         {"index", m_index, false},
    {"isalnum", m_isalnum, false},      {"isalpha", m_isalpha, false},
    {"isdecimal", m_isdigit, false},    {"isdigit", m_isdigit, false},
    {"islower", m_islower, false},      {"isnumeric", m_isdigit, false},
    {"isspace", m_isspace, false},      {"isupper", m_isupper, false},
    {"join", m_join, false},             {"ljust", m_ljust, true},
    {"lower", m_lower, true},           {"lstrip", m_lstrip, true},
    {"partition", m_partition, true},   {"removeprefix", m_removeprefix, false},
    {"removesuffix", m_removesuffix, false}, {"replace", m_replace, true},
    {"rfind", m_rfind, false},          {"rindex", m_rindex, false},
    {"rjust", m_rjust, true},           {"rpartition", m_rpartition, true},
    {"rsplit", m_rsplit, true},         {"rstrip", m_rstrip, true},
    {"split", m_split, true},           {"splitlines", m_splitlines, true},
    {"startswith", m_startswith, false}, {"strip", m_strip, true},
    {"swapcase", m_swapcase, true},     {"title", m_title, true},
    {"upper", m_upper, true},           {"zfill", m_zfill, true},
};

const MethodDef kDictMethods[] = {
    {"copy", m_dict_copy, false}, {"get", m_get, false},       {"items", m_items, false},
    {"keys", m_keys, false},      {"values", m_values, false},
};

const MethodDef kListMethods[] = {
    {"clear", m_list_clear, false}, {"copy", m_list_copy, false},  {"count", m_seq_count, false},
    {"index", m_seq_index, false},  {"pop", m_list_pop, false},
};

const MethodDef kTupleMethods[] = {
    {"count", m_seq_count, false},
    {"index", m_seq_index, false},
};

const char* const kUnsafeDict[] = {"clear", "pop", "popitem", "setdefault", "update"};
const char* const kUnsafeList[] = {"append", "extend", "insert", "remove", "reverse", "sort"};

template <std::size_t N>
const MethodDef* lookup(const MethodDef (&table)[N], const std::string& name) {
  for (const MethodDef& m : table)
    if (name == m.name) return &m;
  return nullptr;
}

template <std::size_t N>
bool listed(const char* const (&names)[N], const std::string& name) {
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

Value escape_arg(const Value& v) {
  if (v.is_string() && !v.safe()) return Value::string(text::html_escape(v.str()), true);
  return v;
}

}  // namespace

std::optional<Value> find_method(const Value& self, const std::string& name) {
  const MethodDef* m = nullptr;
  switch (self.type()) {
    case Value::Type::String: m = lookup(kStrMethods, name); break;
    case Value::Type::Dict:
      if (listed(kUnsafeDict, name))
        return Value::undefined("access to attribute '" + name + "' of 'dict' object is unsafe.", true);
      m = lookup(kDictMethods, name);
      break;
    case Value::Type::List:
      if (listed(kUnsafeList, name))
        return Value::undefined("access to attribute '" + name + "' of 'list' object is unsafe.", true);
      m = lookup(kListMethods, name);
      break;
    case Value::Type::Tuple: m = lookup(kTupleMethods, name); break;
    default: break;
  }
  if (!m) return std::nullopt;
  const Method fn = m->fn;
  const bool wrap = m->markup_wrapped && self.safe();
  return Value::function("method '" + name + "' of '" + type_name(self) + "' object",
                         [fn, self, wrap](Interpreter& in, CallArgs& args) {
                           if (!wrap) return fn(in, self, args);
                           CallArgs escaped;
                           for (const Value& v : args.pos) escaped.pos.push_back(escape_arg(v));
                           for (const auto& [k, v] : args.kw) escaped.kw.emplace_back(k, escape_arg(v));
                           return fn(in, self, escaped);
                         });
}

}  // namespace strata::tmpl
