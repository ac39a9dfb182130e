// jinja2's builtin filters (jinja2/filters.py, 3.1), with transformers'
// tojson in place of jinja2's own.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "template/builtins.h"
#include "template/error.h"
#include "template/format.h"
#include "template/interpreter.h"
#include "template/json.h"
#include "template/text.h"

namespace strata::tmpl {

namespace {

using Args = CallArgs;

Value none() { return Value::none(); }
Value str(const char* s) { return Value::string(s); }
Value boolean(bool b) { return Value::boolean(b); }
Value integer(int64_t i) { return Value::integer(i); }

int64_t int_arg(const Value& v, const char* what) {
  if (v.is_integral()) return v.as_int();
  if (v.is_undefined()) undefined_error(v);
  render_error(std::string("'") + type_name(v) + "' object cannot be interpreted as an integer (" + what + ")");
}

// Python str.lower() for strings, the value itself otherwise (jinja2's ignore_case).
Value ignore_case(const Value& v) { return v.is_string() ? Value::string(text::lower(v.str())) : v; }

std::vector<Value> iterate_filtered(Interpreter& in, const Value& v) {
  return iterate(in, v);
}

// The generator a jinja2 filter returns: `produce` runs on first use.
Value lazy(const char* type, LazySeq::Producer produce) {
  return Value::object(std::make_shared<LazySeq>(type, std::move(produce)));
}

// ------------------------------------------------------------ strings

Value f_upper(Interpreter& in, const Value& v, Args& a) {
  bind_args("upper", a, {});
  return Value::string(text::upper(soft_str(v)), v.safe());
}

Value f_lower(Interpreter& in, const Value& v, Args& a) {
  bind_args("lower", a, {});
  return Value::string(text::lower(soft_str(v)), v.safe());
}

Value f_capitalize(Interpreter& in, const Value& v, Args& a) {
  bind_args("capitalize", a, {});
  return Value::string(text::capitalize(soft_str(v)), v.safe());
}

// Words start after runs of [-\s({\[<]; each piece gets item[0].upper() + item[1:].lower().
Value f_title(Interpreter& in, const Value& v, Args& a) {
  bind_args("title", a, {});
  const std::u32string s = text::decode(soft_str(v));
  auto is_sep = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || text::is_space(c); };
  std::string out;
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t j = i;
    const bool sep = is_sep(s[i]);
    while (j < s.size() && is_sep(s[j]) == sep) ++j;
    // Python: item[0].upper() + item[1:].lower(), for separators too.
    out += text::upper(text::encode(s.substr(i, 1)));
    out += text::lower(text::encode(s.substr(i + 1, j - i - 1)));
    i = j;
  }
  return Value::string(std::move(out));
}

Value f_trim(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("trim", a, {{"chars", none()}});
  std::optional<std::string> chars;
  if (p[0].is_string()) chars = p[0].str();
  else if (!p[0].is_none()) render_error("strip arg must be None or str");
  if (chars && v.safe() && !p[0].safe()) chars = text::html_escape(*chars);
  return Value::string(text::strip(soft_str(v), chars, true, true), v.safe());
}

Value f_replace(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("replace", a, {{"old", {}}, {"new", {}}, {"count", none()}});
  int64_t count = -1;
  if (!p[2].is_none()) count = int_arg(p[2], "count");
  std::string out = text::replace(to_str(v), to_str(p[0]), to_str(p[1]), count);
  in.check_size(out.size());
  return Value::string(std::move(out));
}

Value f_string(Interpreter& in, const Value& v, Args& a) {
  bind_args("string", a, {});
  if (v.is_string()) return v;
  return Value::string(to_str(v));
}

Value f_safe(Interpreter& in, const Value& v, Args& a) {
  bind_args("safe", a, {});
  return Value::string(soft_str(v), true);
}

Value f_escape(Interpreter& in, const Value& v, Args& a) {
  bind_args("escape", a, {});
  if (v.safe()) return v;
  return Value::string(text::html_escape(to_str(v)), true);
}

Value f_forceescape(Interpreter& in, const Value& v, Args& a) {
  bind_args("forceescape", a, {});
  return Value::string(text::html_escape(to_str(v)), true);
}

Value f_center(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("center", a, {{"width", integer(80)}});
  const int64_t width = int_arg(p[0], "width");
  const std::string s = soft_str(v);
  const auto len = static_cast<int64_t>(text::length(s));
  if (width <= len) return Value::string(s);
  in.check_size(static_cast<std::size_t>(width));
  const int64_t marg = width - len;
  const int64_t left = marg / 2 + (marg & width & 1);
  return Value::string(std::string(static_cast<std::size_t>(left), ' ') + s +
                       std::string(static_cast<std::size_t>(marg - left), ' '));
}

Value f_indent(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("indent", a, {{"width", integer(4)}, {"first", boolean(false)}, {"blank", boolean(false)}});
  std::string indention;
  if (p[0].is_string()) {
    indention = p[0].str();
  } else {
    const int64_t w = int_arg(p[0], "width");
    if (w > 0) {
      in.check_size(static_cast<std::size_t>(w));
      indention.assign(static_cast<std::size_t>(w), ' ');
    }
  }
  // jinja2 does `s += "\n"` on the value itself.
  if (v.is_undefined()) undefined_error(v);
  if (!v.is_string()) render_error("unsupported operand type(s) for +=: '" + type_name(v) + "' and 'str'");
  const std::string s = v.str() + "\n";
  const std::vector<std::string> lines = text::splitlines(s, false);
  std::string rv;
  if (truthy(p[2])) {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + indention;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? std::string() : lines[0];
    for (std::size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += indention;
      rv += lines[i];
      in.check_size(rv.size());
    }
  }
  if (truthy(p[1])) rv = indention + rv;
  return Value::string(std::move(rv), v.safe());
}

Value f_truncate(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("truncate", a,
                           {{"length", integer(255)}, {"killwords", boolean(false)}, {"end", str("...")}, {"leeway", none()}});
  const int64_t length = int_arg(p[0], "length");
  const std::u32string end = text::decode(to_str(p[2]));
  const int64_t leeway = p[3].is_none() ? 5 : int_arg(p[3], "leeway");
  if (length < static_cast<int64_t>(end.size()))
    render_error("expected length >= " + std::to_string(end.size()) + ", got " + std::to_string(length));
  if (leeway < 0) render_error("expected leeway >= 0, got " + std::to_string(leeway));
  // A value short enough comes back as it is, whatever its type (len(s)).
  if (tmpl::length(v) <= length + leeway) return v;
  if (!v.is_string()) render_error("'" + type_name(v) + "' object has no attribute 'rsplit'");
  const std::u32string s = text::decode(v.str());
  std::u32string head = s.substr(0, static_cast<std::size_t>(length) - end.size());
  if (!truthy(p[1])) {
    const std::size_t sp = head.rfind(U' ');
    if (sp != std::u32string::npos) head = head.substr(0, sp);
  }
  return Value::string(text::encode(head + end));
}

Value f_wordcount(Interpreter& in, const Value& v, Args& a) {
  bind_args("wordcount", a, {});
  const std::u32string s = text::decode(soft_str(v));
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : s) {
    const bool w = text::is_word(c);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return integer(n);
}

Value f_format(Interpreter& in, const Value& v, Args& a) {
  if (!a.pos.empty() && !a.kw.empty()) render_error("can't handle positional and keyword arguments at the same time");
  Value fmt = v.is_string() ? v : Value::string(to_str(v));
  if (!a.kw.empty()) {
    DictObj d;
    for (auto& [k, val] : a.kw) d.set(Value::string(k), val);
    return Value::string(percent_format(in, fmt, Value::dict(std::move(d))), fmt.safe());
  }
  return Value::string(percent_format(in, fmt, Value::tuple(a.pos)), fmt.safe());
}

// ------------------------------------------------------------ numbers

// Python float(str): surrounding whitespace, underscores between digits,
// inf / nan spelled any case.
std::optional<double> parse_float(const std::string& raw) {
  std::string s = text::strip(raw, std::nullopt, true, true);
  std::string clean;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1])))
        return std::nullopt;
      continue;
    }
    clean += s[i];
  }
  if (clean.empty()) return std::nullopt;
  std::string lower = text::lower(clean);
  std::string body = lower;
  double sign = 1;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    if (body[0] == '-') sign = -1;
    body = body.substr(1);
  }
  if (body == "inf" || body == "infinity") return sign * HUGE_VAL;
  if (body == "nan") return std::nan("");
  for (char c : body)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == '+' || c == '-')) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return d;
}

// Python int(str, base).
std::optional<int64_t> parse_int(const std::string& raw, int base) {
  std::string s = text::strip(raw, std::nullopt, true, true);
  bool neg = false;
  std::size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  if ((base == 16 || base == 0) && s.size() > i + 1 && s[i] == '0' && (s[i + 1] == 'x' || s[i + 1] == 'X')) {
    base = 16;
    i += 2;
    if (i < s.size() && s[i] == '_') ++i;
  } else if ((base == 8 || base == 0) && s.size() > i + 1 && s[i] == '0' && (s[i + 1] == 'o' || s[i + 1] == 'O')) {
    base = 8;
    i += 2;
    if (i < s.size() && s[i] == '_') ++i;
  } else if ((base == 2 || base == 0) && s.size() > i + 1 && s[i] == '0' && (s[i + 1] == 'b' || s[i + 1] == 'B')) {
    base = 2;
    i += 2;
    if (i < s.size() && s[i] == '_') ++i;
  }
  if (base == 0) base = 10;
  if (i >= s.size()) return std::nullopt;
  unsigned __int128 acc = 0;
  bool prev_digit = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_') {
      if (!prev_digit || i + 1 >= s.size()) return std::nullopt;
      prev_digit = false;
      continue;
    }
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'z') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'Z') d = c - 'A' + 10;
    else return std::nullopt;
    if (d >= base) return std::nullopt;
    acc = acc * static_cast<unsigned>(base) + static_cast<unsigned>(d);
    if (acc > static_cast<unsigned __int128>(INT64_MAX) + 1) render_error("integer overflow");
    prev_digit = true;
  }
  if (!prev_digit) return std::nullopt;
  if (!neg && acc > static_cast<unsigned __int128>(INT64_MAX)) render_error("integer overflow");
  return neg ? -static_cast<int64_t>(acc - 1) - 1 : static_cast<int64_t>(acc);
}

int64_t float_to_int(double d) {
  if (std::isinf(d)) render_error("cannot convert float infinity to integer");
  if (std::fabs(d) >= 9.2233720368547758e18) render_error("integer overflow");
  return static_cast<int64_t>(d);
}

Value f_int(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("int", a, {{"default", integer(0)}, {"base", integer(10)}});
  if (v.is_undefined()) undefined_error(v);
  if (v.is_string()) {
    const int64_t base = int_arg(p[1], "base");
    if (base != 0 && (base < 2 || base > 36)) render_error("int() base must be >= 2 and <= 36, or 0");
    if (auto i = parse_int(v.str(), static_cast<int>(base))) return integer(*i);
    if (auto d = parse_float(v.str())) {
      if (std::isnan(*d)) return p[0];
      return integer(float_to_int(*d));
    }
    return p[0];
  }
  if (v.is_integral()) return integer(v.as_int());
  if (v.is_float()) {
    if (std::isnan(v.as_float())) return p[0];
    return integer(float_to_int(v.as_float()));
  }
  return p[0];
}

Value f_float(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("float", a, {{"default", Value::number(0.0)}});
  if (v.is_undefined()) undefined_error(v);
  if (v.is_number()) return Value::number(v.as_float());
  if (v.is_string())
    if (auto d = parse_float(v.str())) return Value::number(*d);
  return p[0];
}

Value f_abs(Interpreter& in, const Value& v, Args& a) {
  bind_args("abs", a, {});
  if (v.is_float()) return Value::number(std::fabs(v.as_float()));
  if (v.is_integral()) {
    if (v.as_int() == INT64_MIN) render_error("integer overflow");
    return integer(std::llabs(v.as_int()));
  }
  render_error("bad operand type for abs(): '" + type_name(v) + "'");
}

double round_half_even(double x, int64_t ndigits) {
  if (!std::isfinite(x) || ndigits > 320) return x;
  if (ndigits >= 0) {
    // printf rounds the exact binary value, half to even, as Python's round does.
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(ndigits), x);
    return std::strtod(buf, nullptr);
  }
  if (ndigits < -308) return std::copysign(0.0, x);
  const double pow10 = std::pow(10.0, static_cast<double>(-ndigits));
  const double y = x / pow10;
  double z = std::nearbyint(y);  // default rounding mode: half to even
  return z * pow10;
}

Value f_round(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("round", a, {{"precision", integer(0)}, {"method", str("common")}});
  const std::string method = to_str(p[1]);
  if (method != "common" && method != "ceil" && method != "floor")
    render_error("method must be common, ceil or floor");
  const int64_t precision = int_arg(p[0], "precision");
  if (!v.is_number()) {
    if (v.is_undefined()) undefined_error(v);
    render_error("type " + type_name(v) + " doesn't define __round__ method");
  }
  if (method == "common") {
    if (v.is_integral()) {
      const int64_t i = v.as_int();
      if (precision >= 0) return integer(i);
      if (precision < -18) return integer(0);
      int64_t pow10 = 1;
      for (int64_t k = 0; k < -precision; ++k) pow10 *= 10;
      int64_t q = i / pow10, r = i % pow10;
      if (r < 0) {
        r += pow10;
        q -= 1;
      }
      if (2 * r > pow10 || (2 * r == pow10 && (q & 1))) q += 1;
      return integer(q * pow10);
    }
    return Value::number(round_half_even(v.as_float(), precision));
  }
  const Value scale = in.binary(BinOp::Pow, integer(10), p[0]);
  const double scaled = v.as_float() * scale.as_float();
  const double r = method == "ceil" ? std::ceil(scaled) : std::floor(scaled);
  return Value::number(r / scale.as_float());
}

// ------------------------------------------------------------ sequences

Value f_length(Interpreter& in, const Value& v, Args& a) {
  bind_args("length", a, {});
  return integer(length(v));
}

Value f_list(Interpreter& in, const Value& v, Args& a) {
  bind_args("list", a, {});
  return Value::list(iterate_filtered(in, v));
}

Value f_first(Interpreter& in, const Value& v, Args& a) {
  bind_args("first", a, {});
  if (v.is_string()) {
    if (v.str().empty()) return Value::undefined("No first item, sequence was empty.");
    std::size_t i = 0;
    text::next(v.str(), i);
    return Value::string(v.str().substr(0, i));  // next(iter(Markup)) is a plain str
  }
  if (LazySeq* it = as_lazy(v)) {
    Value first;
    if (!it->next(in, first)) return Value::undefined("No first item, sequence was empty.");
    return first;
  }
  std::vector<Value> items = iterate_filtered(in, v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interpreter& in, const Value& v, Args& a) {
  bind_args("last", a, {});
  const bool reversible = v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined() ||
                          (v.is_object() && v.object().reversible());
  if (!reversible) render_error("'" + type_name(v) + "' object is not reversible");
  std::vector<Value> items = iterate(in, v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

// str -> reversed str; otherwise reversed(value), an iterator, or when the
// value cannot be reversed (a generator) a reversed list of its items.
Value f_reverse(Interpreter& in, const Value& v, Args& a) {
  bind_args("reverse", a, {});
  if (v.is_string()) {
    std::u32string s = text::decode(v.str());
    std::reverse(s.begin(), s.end());
    return Value::string(text::encode(s), v.safe());
  }
  if (v.is_list() || v.is_tuple() || v.is_dict() || v.is_undefined() || (v.is_object() && v.object().reversible())) {
    const char* type = v.is_list() ? "list_reverseiterator" : v.is_dict() ? "dict_reversekeyiterator" : "reversed";
    const Value subject = v;
    return lazy(type, [subject](Interpreter& in) {
      std::vector<Value> items = iterate(in, subject);
      std::reverse(items.begin(), items.end());
      return items;
    });
  }
  if (!v.is_object() || !v.object().iterable()) render_error("argument must be iterable");
  std::vector<Value> items = iterate(in, v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_join(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("join", a, {{"d", str("")}, {"attribute", none()}});
  const std::string sep = to_str(p[0]);
  std::string out;
  bool first = true;
  for (const Value& item : iterate_filtered(in, v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(p[1].is_none() ? item : get_attribute_path(in, item, p[1]));
    in.check_size(out.size());
  }
  return Value::string(std::move(out));
}

Value f_items(Interpreter& in, const Value& v, Args& a) {
  bind_args("items", a, {});
  const Value subject = v;
  return lazy("generator", [subject](Interpreter&) {
    std::vector<Value> out;
    if (subject.is_undefined()) return out;
    if (!subject.is_dict()) render_error("Can only get item pairs from a mapping.");
    for (const auto& [k, val] : subject.dict().items()) out.push_back(Value::tuple({k, val}));
    return out;
  });
}

// Stable sort on keys with Python's < (TypeError for unorderable keys).
std::vector<Value> sorted_by(std::vector<Value> items, const std::vector<Value>& keys, bool reverse) {
  std::vector<std::size_t> order(items.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    return reverse ? less(keys[y], keys[x]) : less(keys[x], keys[y]);
  });
  std::vector<Value> out;
  out.reserve(items.size());
  for (std::size_t i : order) out.push_back(std::move(items[i]));
  return out;
}

Value f_dictsort(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("dictsort", a,
                           {{"case_sensitive", boolean(false)}, {"by", str("key")}, {"reverse", boolean(false)}});
  const std::string by = to_str(p[1]);
  if (by != "key" && by != "value") render_error("You can only sort by either \"key\" or \"value\"");
  if (v.is_undefined()) undefined_error(v);
  if (!v.is_dict()) render_error("'" + type_name(v) + "' object has no attribute 'items'");
  std::vector<Value> items, keys;
  for (const auto& [k, val] : v.dict().items()) {
    items.push_back(Value::tuple({k, val}));
    const Value& key = by == "key" ? k : val;
    keys.push_back(truthy(p[0]) ? key : ignore_case(key));
  }
  return Value::list(sorted_by(std::move(items), keys, truthy(p[2])));
}

// make_multi_attrgetter: "a,b" -> [item.a, item.b]; no attribute -> [item].
Value multi_key(Interpreter& in, const Value& item, const Value& attribute, bool case_sensitive) {
  std::vector<Value> parts;
  if (attribute.is_string()) {
    for (const std::string& part : text::split(attribute.str(), std::string(","), -1)) {
      Value k = get_attribute_path(in, item, Value::string(part));
      parts.push_back(case_sensitive ? k : ignore_case(k));
    }
  } else {
    Value k = get_attribute_path(in, item, attribute);
    parts.push_back(case_sensitive ? k : ignore_case(k));
  }
  return Value::list(std::move(parts));
}

Value f_sort(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("sort", a, {{"reverse", boolean(false)}, {"case_sensitive", boolean(false)}, {"attribute", none()}});
  std::vector<Value> items = iterate_filtered(in, v);
  std::vector<Value> keys;
  for (const Value& item : items) keys.push_back(multi_key(in, item, p[2], truthy(p[1])));
  return Value::list(sorted_by(std::move(items), keys, truthy(p[0])));
}

Value f_unique(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("unique", a, {{"case_sensitive", boolean(false)}, {"attribute", none()}});
  const Value subject = v;
  return lazy("generator", [subject, p](Interpreter& in) {
    std::vector<Value> out, seen;
    for (const Value& item : iterate_filtered(in, subject)) {
      Value key = get_attribute_path(in, item, p[1]);
      if (!truthy(p[0])) key = ignore_case(key);
      check_hashable(key);
      bool dup = false;
      for (const Value& s : seen)
        if (equals(s, key)) {
          dup = true;
          break;
        }
      if (dup) continue;
      in.step();
      seen.push_back(key);
      out.push_back(item);
    }
    return out;
  });
}

Value min_max(Interpreter& in, const Value& v, Args& a, bool want_max) {
  const auto p = bind_args(want_max ? "max" : "min", a, {{"case_sensitive", boolean(false)}, {"attribute", none()}});
  std::vector<Value> items = iterate_filtered(in, v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& item) {
    Value k = get_attribute_path(in, item, p[1]);
    return truthy(p[0]) ? k : ignore_case(k);
  };
  std::size_t best = 0;
  Value best_key = key(items[0]);
  for (std::size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    if (want_max ? less(best_key, k) : less(k, best_key)) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}

Value f_min(Interpreter& in, const Value& v, Args& a) { return min_max(in, v, a, false); }
Value f_max(Interpreter& in, const Value& v, Args& a) { return min_max(in, v, a, true); }

Value f_sum(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("sum", a, {{"attribute", none()}, {"start", integer(0)}});
  Value acc = p[1];
  for (const Value& item : iterate_filtered(in, v)) {
    if (acc.is_string()) render_error("sum() can't sum strings [use ''.join(seq) instead]");
    acc = in.binary(BinOp::Add, acc, get_attribute_path(in, item, p[0]));
  }
  return acc;
}

Value f_batch(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("batch", a, {{"linecount", {}}, {"fill_with", none()}});
  const Value subject = v;
  return lazy("generator", [subject, p](Interpreter& in) {
    const int64_t n = int_arg(p[0], "linecount");
    std::vector<Value> out, cur;
    for (const Value& item : iterate_filtered(in, subject)) {
      if (static_cast<int64_t>(cur.size()) == n) {
        out.push_back(Value::list(std::move(cur)));
        cur.clear();
      }
      cur.push_back(item);
    }
    if (!cur.empty()) {
      if (!p[1].is_none() && static_cast<int64_t>(cur.size()) < n) {
        in.check_size(static_cast<std::size_t>(n));
        while (static_cast<int64_t>(cur.size()) < n) cur.push_back(p[1]);
      }
      out.push_back(Value::list(std::move(cur)));
    }
    return out;
  });
}

Value f_slice(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("slice", a, {{"slices", {}}, {"fill_with", none()}});
  const Value subject = v;
  return lazy("generator", [subject, p](Interpreter& in) {
    std::vector<Value> seq = iterate_filtered(in, subject);
    const int64_t slices = int_arg(p[0], "slices");
    std::vector<Value> out;
    if (slices <= 0) {
      if (slices == 0 && !seq.empty()) render_error("integer division or modulo by zero");
      return out;
    }
    in.check_size(static_cast<std::size_t>(slices));
    const auto len = static_cast<int64_t>(seq.size());
    const int64_t per = len / slices, extra = len % slices;
    int64_t offset = 0;
    for (int64_t k = 0; k < slices; ++k) {
      const int64_t start = offset + k * per;
      if (k < extra) ++offset;
      const int64_t end = offset + (k + 1) * per;
      std::vector<Value> tmp(seq.begin() + start, seq.begin() + end);
      if (!p[1].is_none() && k >= extra) tmp.push_back(p[1]);
      out.push_back(Value::list(std::move(tmp)));
    }
    return out;
  });
}

Value f_default(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("default", a, {{"default_value", str("")}, {"boolean", boolean(false)}});
  if (v.is_undefined() || (truthy(p[1]) && !truthy(v))) return p[0];
  return v;
}

Value f_attr(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("attr", a, {{"name", {}}});
  if (!p[0].is_string()) render_error("attribute name must be string");
  const std::string& name = p[0].str();
  const bool has = (v.is_string() || v.is_sequence() || v.is_dict()) ? find_method(v, name).has_value()
                   : v.is_namespace() ? v.ns().attrs.find(std::string_view(name)) != nullptr
                   : v.is_object()    ? !v.object().getattr(name).is_undefined()
                                      : false;
  if (v.is_undefined()) undefined_error(v);
  if (!has) return Value::undefined("'" + object_type_repr(v) + "' has no attribute '" + name + "'");
  return in.getattr(v, name);
}

// map / select / reject / selectattr / rejectattr

// `if value:` then one result per item: an attribute lookup (attribute=,
// default=) or another filter applied with the remaining arguments.
Value f_map(Interpreter& in, const Value& v, Args& a) {
  const Value subject = v;
  const Args args = a;
  return lazy("generator", [subject, args](Interpreter& in) {
    std::vector<Value> out;
    if (!truthy(subject)) return out;
    if (args.pos.empty()) {
      Value attribute, def = none();
      bool have_attr = false;
      for (const auto& [k, val] : args.kw) {
        if (k == "attribute") {
          attribute = val;
          have_attr = true;
        } else if (k == "default") {
          def = val;
        }
      }
      if (!have_attr) render_error("map requires a filter argument");
      for (const auto& kv : args.kw)
        if (kv.first != "attribute" && kv.first != "default") render_error("Unexpected keyword argument '" + kv.first + "'");
      for (const Value& item : iterate_filtered(in, subject)) {
        Value r = get_attribute_path(in, item, attribute);
        if (r.is_undefined() && !def.is_none()) r = def;
        out.push_back(std::move(r));
      }
      return out;
    }
    const std::string name = to_str(args.pos[0]);
    CallArgs rest;
    rest.pos.assign(args.pos.begin() + 1, args.pos.end());
    rest.kw = args.kw;
    for (const Value& item : iterate_filtered(in, subject)) {
      CallArgs call = rest;
      out.push_back(in.call_filter(name, item, call));
    }
    return out;
  });
}

// jinja2's select_or_reject: `if value:`, then keep the items whose test
// (or truth) matches.
Value select_reject(Interpreter& in, const Value& v, Args& a, bool select, bool by_attr) {
  const Value subject = v;
  const Args args = a;
  return lazy("generator", [subject, args, select, by_attr](Interpreter& in) {
    std::vector<Value> out;
    if (!truthy(subject)) return out;
    std::size_t off = 0;
    Value attribute;
    if (by_attr) {
      if (args.pos.empty()) render_error("Missing parameter for attribute name");
      attribute = args.pos[0];
      off = 1;
    }
    const bool has_test = args.pos.size() > off;
    const std::string test_name = has_test ? to_str(args.pos[off]) : std::string();
    CallArgs rest;
    if (has_test) rest.pos.assign(args.pos.begin() + static_cast<std::ptrdiff_t>(off + 1), args.pos.end());
    rest.kw = args.kw;
    for (const Value& item : iterate_filtered(in, subject)) {
      const Value tested = by_attr ? get_attribute_path(in, item, attribute) : item;
      bool ok;
      if (has_test) {
        CallArgs call = rest;
        ok = in.call_test(test_name, tested, call);
      } else {
        ok = truthy(tested);
      }
      if (ok == select) out.push_back(item);
    }
    return out;
  });
}

Value f_select(Interpreter& in, const Value& v, Args& a) { return select_reject(in, v, a, true, false); }
Value f_reject(Interpreter& in, const Value& v, Args& a) { return select_reject(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, Args& a) { return select_reject(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, Args& a) { return select_reject(in, v, a, false, true); }

// transformers: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
Value f_tojson(Interpreter& in, const Value& v, Args& a) {
  const auto p = bind_args("tojson", a,
                           {{"ensure_ascii", boolean(false)}, {"indent", none()}, {"separators", none()}, {"sort_keys", boolean(false)}});
  JsonDumpOptions o;
  o.ensure_ascii = truthy(p[0]);
  if (p[1].is_string()) {
    o.indent = p[1].str();
  } else if (p[1].is_integral()) {
    const int64_t n = p[1].as_int();
    in.check_size(static_cast<std::size_t>(std::max<int64_t>(n, 0)));
    o.indent = std::string(static_cast<std::size_t>(std::max<int64_t>(n, 0)), ' ');
  } else if (!p[1].is_none()) {
    render_error("can't multiply sequence by non-int of type '" + type_name(p[1]) + "'");
  }
  if (!p[2].is_none()) {
    std::vector<Value> seps = iterate(in, p[2]);
    if (seps.size() != 2) render_error("separators must be a (item_separator, key_separator) pair");
    o.separators = std::make_pair(to_str(seps[0]), to_str(seps[1]));
  }
  o.sort_keys = truthy(p[3]);
  std::string out = json_dumps(v, o);
  in.check_size(out.size());
  return Value::string(std::move(out));
}

#define STRATA_UNSUPPORTED_FILTER(name)                                                     \
  Value f_##name(Interpreter&, const Value&, Args&) {                                       \
    render_error("the jinja2 filter '" #name "' is not supported by strata's template engine"); \
  }
STRATA_UNSUPPORTED_FILTER(filesizeformat)
STRATA_UNSUPPORTED_FILTER(groupby)
STRATA_UNSUPPORTED_FILTER(pprint)
STRATA_UNSUPPORTED_FILTER(random)
STRATA_UNSUPPORTED_FILTER(striptags)
STRATA_UNSUPPORTED_FILTER(urlencode)
STRATA_UNSUPPORTED_FILTER(urlize)
STRATA_UNSUPPORTED_FILTER(wordwrap)
STRATA_UNSUPPORTED_FILTER(xmlattr)
#undef STRATA_UNSUPPORTED_FILTER

const FilterDef kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"filesizeformat", f_filesizeformat},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_forceescape},
    {"format", f_format},
    {"groupby", f_groupby},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"pprint", f_pprint},
    {"random", f_random},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"slice", f_slice},
    {"sort", f_sort},
    {"string", f_string},
    {"striptags", f_striptags},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"unique", f_unique},
    {"upper", f_upper},
    {"urlencode", f_urlencode},
    {"urlize", f_urlize},
    {"wordcount", f_wordcount},
    {"wordwrap", f_wordwrap},
    {"xmlattr", f_xmlattr},
};

}  // namespace

const FilterDef* find_filter(std::string_view name) {
  for (const FilterDef& f : kFilters)
    if (name == f.name) return &f;
  return nullptr;
}

}  // namespace strata::tmpl
