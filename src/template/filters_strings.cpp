// jinja2's string filters (upper, trim, replace, indent, truncate, format, ...)
// and transformers' tojson, which replaces jinja2's own.
#include <algorithm>

#include "template/error.h"
#include "template/filters_internal.h"
#include "template/format.h"
#include "template/interpreter.h"
#include "template/json.h"
#include "template/text.h"

namespace strata::tmpl::detail {

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

}  // namespace strata::tmpl::detail
