#include "template/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "template/error.h"
#include "template/interpreter.h"
#include "template/text.h"

namespace strata::tmpl {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string pad(const std::string& s, int64_t width, char align, char32_t fill, std::size_t sign_len = 0) {
  const auto len = static_cast<int64_t>(text::length(s));
  if (width <= len) return s;
  const int64_t n = width - len;
  std::string f;
  text::append(f, fill);
  auto fills = [&](int64_t k) {
    std::string out;
    for (int64_t i = 0; i < k; ++i) out += f;
    return out;
  };
  switch (align) {
    case '<': return s + fills(n);
    case '^': return fills(n / 2) + s + fills(n - n / 2);
    case '=': return s.substr(0, sign_len) + fills(n) + s.substr(sign_len);
    default: return fills(n) + s;
  }
}

std::string group_digits(const std::string& digits, char sep, int every) {
  std::string out;
  const int n = static_cast<int>(digits.size());
  for (int i = 0; i < n; ++i) {
    if (i > 0 && (n - i) % every == 0) out += sep;
    out += digits[i];
  }
  return out;
}

// int(x) for %d and friends: floats truncate, anything else is a TypeError.
int64_t to_int(const Value& v, char conv) {
  if (v.is_integral()) return v.as_int();
  if (v.is_float() && conv != 'x' && conv != 'X' && conv != 'o' && conv != 'c') {
    const double d = v.as_float();
    if (!std::isfinite(d)) render_error("cannot convert float " + text::float_repr(d) + " to integer");
    if (std::fabs(d) >= 9.2e18) render_error("integer overflow");
    return static_cast<int64_t>(d);
  }
  if (v.is_undefined()) undefined_error(v);
  render_error(std::string("%") + conv + " format: " + (conv == 'd' || conv == 'i' || conv == 'u' ? "a real number" : "an integer") +
               " is required, not " + type_name(v));
}

double to_float(const Value& v) {
  if (v.is_number()) return v.as_float();
  if (v.is_undefined()) undefined_error(v);
  render_error("must be real number, not " + type_name(v));
}

std::string c_format(const std::string& spec, double d) {
  char buf[512];
  const int n = std::snprintf(buf, sizeof buf, spec.c_str(), d);
  if (n < 0 || static_cast<std::size_t>(n) >= sizeof buf) {
    std::string big(static_cast<std::size_t>(std::max(n, 0)) + 1, '\0');
    std::snprintf(big.data(), big.size(), spec.c_str(), d);
    big.pop_back();
    return big;
  }
  return std::string(buf, static_cast<std::size_t>(n));
}

std::string c_format_int(const std::string& spec, long long v) {
  char buf[512];
  const int n = std::snprintf(buf, sizeof buf, spec.c_str(), v);
  return std::string(buf, static_cast<std::size_t>(std::max(0, std::min<int>(n, sizeof buf - 1))));
}

}  // namespace

std::string percent_format(Interpreter& in, const Value& fmt, const Value& args) {
  const std::string& f = fmt.str();
  std::vector<Value> positional = args.is_tuple() ? args.items() : std::vector<Value>{args};
  // Python treats any argument with __getitem__ (but a tuple or str) as the
  // mapping for %(key)s, and then does not complain about unused arguments.
  const bool mapping_like = args.is_dict() || args.is_list() || args.is_undefined();
  const DictObj* mapping = args.is_dict() ? &args.dict() : nullptr;
  std::size_t next = 0;
  bool used_mapping = false;
  auto take = [&]() -> const Value& {
    if (next >= positional.size()) render_error("not enough arguments for format string");
    return positional[next++];
  };
  auto escaped = [&](std::string s, const Value& v) {
    return fmt.safe() && !v.safe() ? text::html_escape(s) : s;
  };
  std::string out;
  for (std::size_t i = 0; i < f.size();) {
    if (f[i] != '%') {
      out += f[i++];
      continue;
    }
    ++i;
    if (i >= f.size()) render_error("incomplete format");
    const Value* arg = nullptr;
    Value keyed;
    if (f[i] == '(') {
      if (args.is_undefined()) undefined_error(args);
      if (args.is_list()) render_error("list indices must be integers or slices, not str");
      if (!mapping) render_error("format requires a mapping");
      int depth = 1;
      std::size_t j = i + 1;
      while (j < f.size() && depth > 0) {
        if (f[j] == '(') ++depth;
        else if (f[j] == ')') --depth;
        ++j;
      }
      if (depth > 0) render_error("incomplete format key");
      const std::string key = f.substr(i + 1, j - i - 2);
      const Value* v = mapping->find(std::string_view(key));
      if (!v) render_error("KeyError: " + text::repr(key));
      keyed = *v;
      arg = &keyed;
      used_mapping = true;
      i = j;
    }
    std::string flags;
    while (i < f.size() && (f[i] == '-' || f[i] == '+' || f[i] == ' ' || f[i] == '#' || f[i] == '0')) flags += f[i++];
    int64_t width = -1, precision = -1;
    if (i < f.size() && f[i] == '*') {
      const Value& w = take();
      if (!w.is_integral()) render_error("* wants int");
      width = w.as_int();
      ++i;
    } else {
      while (i < f.size() && is_digit(f[i])) {
        width = std::max<int64_t>(width, 0) * 10 + (f[i++] - '0');
        if (width > 1 << 20) render_error("width too big");
      }
    }
    if (i < f.size() && f[i] == '.') {
      ++i;
      precision = 0;
      if (i < f.size() && f[i] == '*') {
        const Value& p = take();
        if (!p.is_integral()) render_error("* wants int");
        precision = p.as_int();
        ++i;
      } else {
        while (i < f.size() && is_digit(f[i])) {
          precision = precision * 10 + (f[i++] - '0');
          if (precision > 1 << 20) render_error("precision too big");
        }
      }
    }
    while (i < f.size() && (f[i] == 'h' || f[i] == 'l' || f[i] == 'L')) ++i;
    if (i >= f.size()) render_error("incomplete format");
    const char conv = f[i++];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (!arg) arg = &take();
    const bool left = flags.find('-') != std::string::npos;
    std::string piece;
    switch (conv) {
      case 's':
      case 'r':
      case 'a': {
        piece = escaped(conv == 's' ? to_str(*arg) : repr(*arg), *arg);
        if (precision >= 0) {
          const std::u32string cps = text::decode(piece);
          if (static_cast<int64_t>(cps.size()) > precision) piece = text::encode(cps.substr(0, static_cast<std::size_t>(precision)));
        }
        piece = pad(piece, width, left ? '<' : '>', ' ');
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        const int64_t v = to_int(*arg, conv);
        std::string spec = "%" + flags;
        if (width >= 0) spec += std::to_string(width);
        if (precision >= 0) spec += "." + std::to_string(precision);
        spec += "ll";
        spec += conv == 'u' || conv == 'i' ? 'd' : conv;
        if (conv == 'x' || conv == 'X' || conv == 'o') {
          // C prints negative numbers as unsigned; Python prints a minus sign.
          std::string body = c_format_int("%" + std::string(flags.find('#') != std::string::npos ? "#" : "") + "ll" + conv,
                                          static_cast<long long>(v < 0 ? -v : v));
          if (conv == 'o' && flags.find('#') != std::string::npos) body = "0o" + body.substr(body.size() > 1 ? 1 : 0);
          if (v < 0) body = "-" + body;
          else if (flags.find('+') != std::string::npos) body = "+" + body;
          else if (flags.find(' ') != std::string::npos) body = " " + body;
          const bool zero = flags.find('0') != std::string::npos && !left;
          piece = pad(body, width, left ? '<' : zero ? '=' : '>', zero ? '0' : ' ',
                      (v < 0 || flags.find_first_of("+ ") != std::string::npos ? 1 : 0) +
                          (flags.find('#') != std::string::npos ? 2 : 0));
        } else {
          piece = c_format_int(spec, static_cast<long long>(v));
        }
        break;
      }
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G': {
        std::string spec = "%" + flags;
        if (width >= 0) spec += std::to_string(width);
        if (precision >= 0) spec += "." + std::to_string(precision);
        spec += conv;
        piece = c_format(spec, to_float(*arg));
        break;
      }
      case 'c': {
        if (arg->is_string()) {
          if (text::length(arg->str()) != 1) render_error("%c requires int or char");
          piece = arg->str();
        } else {
          const int64_t cp = to_int(*arg, 'c');
          if (cp < 0 || cp > 0x10FFFF) render_error("%c arg not in range(0x110000)");
          text::append(piece, static_cast<char32_t>(cp));
        }
        piece = pad(piece, width, left ? '<' : '>', ' ');
        break;
      }
      default:
        render_error(std::string("unsupported format character '") + conv + "'");
    }
    in.check_size(out.size() + piece.size());
    out += piece;
  }
  if (!mapping_like && !used_mapping && next < positional.size())
    render_error("not all arguments converted during string formatting");
  return out;
}

// ---------------------------------------------------------------- str.format

namespace {

struct Spec {
  char32_t fill = ' ';
  char align = 0;
  char sign = 0;
  bool alt = false;
  bool zero = false;
  int64_t width = -1;
  char grouping = 0;
  int64_t precision = -1;
  char type = 0;
};

Spec parse_spec(const std::string& s) {
  Spec spec;
  const std::u32string c = text::decode(s);
  std::size_t i = 0;
  auto is_align = [](char32_t ch) { return ch == '<' || ch == '>' || ch == '^' || ch == '='; };
  if (c.size() >= 2 && is_align(c[1])) {
    spec.fill = c[0];
    spec.align = static_cast<char>(c[1]);
    i = 2;
  } else if (!c.empty() && is_align(c[0])) {
    spec.align = static_cast<char>(c[0]);
    i = 1;
  }
  if (i < c.size() && (c[i] == '+' || c[i] == '-' || c[i] == ' ')) spec.sign = static_cast<char>(c[i++]);
  if (i < c.size() && c[i] == '#') {
    spec.alt = true;
    ++i;
  }
  if (i < c.size() && c[i] == '0') {
    spec.zero = true;
    ++i;
  }
  while (i < c.size() && c[i] >= '0' && c[i] <= '9') {
    spec.width = std::max<int64_t>(spec.width, 0) * 10 + (c[i++] - '0');
    if (spec.width > 1 << 20) render_error("Too many decimal digits in format string");
  }
  if (i < c.size() && (c[i] == ',' || c[i] == '_')) spec.grouping = static_cast<char>(c[i++]);
  if (i < c.size() && c[i] == '.') {
    ++i;
    if (i >= c.size() || c[i] < '0' || c[i] > '9') render_error("Format specifier missing precision");
    spec.precision = 0;
    while (i < c.size() && c[i] >= '0' && c[i] <= '9') {
      spec.precision = spec.precision * 10 + (c[i++] - '0');
      if (spec.precision > 1 << 20) render_error("Too many decimal digits in format string");
    }
  }
  if (i < c.size()) spec.type = static_cast<char>(c[i++]);
  if (i < c.size()) render_error("Invalid format specifier");
  return spec;
}

std::string finish_number(std::string body, bool negative, const Spec& spec) {
  std::string sign = negative ? "-" : spec.sign == '+' ? "+" : spec.sign == ' ' ? " " : "";
  std::string s = sign + body;
  char align = spec.align;
  char32_t fill = spec.fill;
  if (spec.zero && !align) {
    align = '=';
    fill = '0';
  }
  return pad(s, spec.width, align ? align : '>', fill, sign.size());
}

std::string format_value(const Value& v, const std::string& spec_text) {
  if (spec_text.empty()) return to_str(v);
  const Spec spec = parse_spec(spec_text);
  if (v.is_string()) {
    if (spec.type && spec.type != 's') render_error(std::string("Unknown format code '") + spec.type + "' for object of type 'str'");
    if (spec.sign) render_error("Sign not allowed in string format specifier");
    std::string s = v.str();
    if (spec.precision >= 0) {
      const std::u32string c = text::decode(s);
      if (static_cast<int64_t>(c.size()) > spec.precision) s = text::encode(c.substr(0, static_cast<std::size_t>(spec.precision)));
    }
    return pad(s, spec.width, spec.align ? spec.align : '<', spec.fill);
  }
  if (v.is_integral() && spec.type != 'e' && spec.type != 'E' && spec.type != 'f' && spec.type != 'F' &&
      spec.type != 'g' && spec.type != 'G' && spec.type != '%') {
    if (spec.precision >= 0) render_error("Precision not allowed in integer format specifier");
    const int64_t i = v.as_int();
    const uint64_t mag = i < 0 ? 0 - static_cast<uint64_t>(i) : static_cast<uint64_t>(i);
    std::string digits;
    switch (spec.type) {
      case 0:
      case 'd':
      case 'n': digits = std::to_string(mag); break;
      case 'x':
      case 'X': {
        char buf[32];
        std::snprintf(buf, sizeof buf, spec.type == 'x' ? "%llx" : "%llX", static_cast<unsigned long long>(mag));
        digits = buf;
        if (spec.alt) digits = (spec.type == 'x' ? "0x" : "0X") + digits;
        break;
      }
      case 'o': {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%llo", static_cast<unsigned long long>(mag));
        digits = buf;
        if (spec.alt) digits = "0o" + digits;
        break;
      }
      case 'b': {
        for (uint64_t m = mag; m; m >>= 1) digits.insert(digits.begin(), static_cast<char>('0' + (m & 1)));
        if (digits.empty()) digits = "0";
        if (spec.alt) digits = "0b" + digits;
        break;
      }
      case 'c': {
        if (i < 0 || i > 0x10FFFF) render_error("%c arg not in range(0x110000)");
        text::append(digits, static_cast<char32_t>(i));
        return pad(digits, spec.width, spec.align ? spec.align : '<', spec.fill);
      }
      default: render_error(std::string("Unknown format code '") + spec.type + "' for object of type 'int'");
    }
    if (spec.grouping && (spec.type == 0 || spec.type == 'd')) digits = group_digits(digits, spec.grouping, 3);
    return finish_number(digits, i < 0, spec);
  }
  if (v.is_number()) {
    double d = v.as_float();
    const bool negative = std::signbit(d) && !std::isnan(d);
    d = std::fabs(d);
    std::string body;
    char type = spec.type;
    if (type == 0 && spec.precision < 0) {
      body = text::float_repr(d);
    } else {
      const int64_t prec = spec.precision >= 0 ? spec.precision : 6;
      if (type == '%') {
        body = c_format("%." + std::to_string(prec) + "f", d * 100) + "%";
      } else if (type == 0) {
        body = c_format("%." + std::to_string(std::max<int64_t>(prec, 1)) + "g", d);
        if (body.find_first_of(".en") == std::string::npos) body += ".0";
      } else if (std::string("eEfFgGn").find(type) != std::string::npos) {
        if (type == 'n') type = 'g';
        body = c_format("%" + std::string(spec.alt ? "#" : "") + "." + std::to_string(prec) + type, d);
      } else {
        render_error(std::string("Unknown format code '") + type + "' for object of type 'float'");
      }
    }
    if (spec.grouping) {
      const std::size_t end = body.find_first_not_of("0123456789");
      body = group_digits(body.substr(0, end), spec.grouping, 3) + (end == std::string::npos ? "" : body.substr(end));
    }
    return finish_number(body, negative, spec);
  }
  if (v.is_undefined()) return pad("", spec.width, spec.align ? spec.align : '<', spec.fill);
  render_error("unsupported format string passed to " + type_name(v) + ".__format__");
}

}  // namespace

std::string str_format(Interpreter& in, const Value& fmt, const CallArgs& args) {
  const std::string& f = fmt.str();
  std::string out;
  int auto_index = 0;
  bool manual = false, automatic = false;
  auto lookup_arg = [&](const std::string& name) -> Value {
    if (name.empty()) {
      if (manual) render_error("cannot switch from manual field specification to automatic field numbering");
      automatic = true;
      const auto idx = static_cast<std::size_t>(auto_index++);
      if (idx >= args.pos.size()) render_error("Replacement index " + std::to_string(idx) + " out of range for positional args tuple");
      return args.pos[idx];
    }
    if (std::all_of(name.begin(), name.end(), is_digit)) {
      if (automatic) render_error("cannot switch from automatic field numbering to manual field specification");
      manual = true;
      const auto idx = std::stoull(name.size() > 18 ? std::string("999999999") : name);
      if (idx >= args.pos.size()) render_error("Replacement index " + name + " out of range for positional args tuple");
      return args.pos[idx];
    }
    for (const auto& [k, v] : args.kw)
      if (k == name) return v;
    render_error("KeyError: " + text::repr(name));
  };
  auto field_value = [&](const std::string& field) -> Value {
    std::size_t i = 0;
    while (i < field.size() && field[i] != '.' && field[i] != '[') ++i;
    Value v = lookup_arg(field.substr(0, i));
    while (i < field.size()) {
      if (field[i] == '.') {
        std::size_t j = i + 1;
        while (j < field.size() && field[j] != '.' && field[j] != '[') ++j;
        if (j == i + 1) render_error("Empty attribute in format string");
        v = in.getattr(v, field.substr(i + 1, j - i - 1));
        i = j;
      } else {
        const std::size_t j = field.find(']', i);
        if (j == std::string::npos) render_error("Missing ']' in format string");
        const std::string key = field.substr(i + 1, j - i - 1);
        if (key.empty()) render_error("Empty attribute in format string");
        const bool numeric = std::all_of(key.begin(), key.end(), is_digit) && key.size() < 18;
        v = in.getitem(v, numeric ? Value::integer(std::stoll(key)) : Value::string(key));
        i = j + 1;
        if (i < field.size() && field[i] != '.' && field[i] != '[')
          render_error("Only '.' or '[' may follow ']' in format field specifier");
      }
    }
    return v;
  };
  for (std::size_t i = 0; i < f.size();) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') {
        out += '}';
        i += 2;
        continue;
      }
      render_error("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      ++i;
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      i += 2;
      continue;
    }
    // {field!conv:spec} with one level of nested {} in the spec.
    std::size_t j = i + 1;
    int depth = 1;
    while (j < f.size() && depth > 0) {
      if (f[j] == '{') ++depth;
      else if (f[j] == '}') --depth;
      if (depth > 0) ++j;
    }
    if (j >= f.size()) render_error("expected '}' before end of string");
    const std::string inner = f.substr(i + 1, j - i - 1);
    i = j + 1;
    std::size_t k = 0;
    while (k < inner.size() && inner[k] != '!' && inner[k] != ':') {
      if (inner[k] == '[') {
        const std::size_t close = inner.find(']', k);
        k = close == std::string::npos ? inner.size() : close + 1;
      } else {
        ++k;
      }
    }
    const std::string field = inner.substr(0, k);
    char conversion = 0;
    if (k < inner.size() && inner[k] == '!') {
      if (k + 1 >= inner.size()) render_error("end of string while looking for conversion specifier");
      conversion = inner[k + 1];
      k += 2;
      if (k < inner.size() && inner[k] != ':') render_error("expected ':' after conversion specifier");
    }
    std::string spec = k < inner.size() ? inner.substr(k + 1) : std::string();
    if (spec.find('{') != std::string::npos) {
      // Nested replacement fields in the spec.
      std::string expanded;
      for (std::size_t p = 0; p < spec.size();) {
        if (spec[p] == '{') {
          const std::size_t q = spec.find('}', p);
          if (q == std::string::npos) render_error("unmatched '{' in format spec");
          expanded += to_str(field_value(spec.substr(p + 1, q - p - 1)));
          p = q + 1;
        } else {
          expanded += spec[p++];
        }
      }
      spec = expanded;
    }
    Value v = field_value(field);
    if (conversion == 'r' || conversion == 'a') v = Value::string(repr(v));
    else if (conversion == 's') v = Value::string(to_str(v));
    else if (conversion) render_error(std::string("Unknown conversion specifier ") + conversion);
    std::string piece = format_value(v, spec);
    if (fmt.safe() && !(v.is_string() && v.safe())) piece = text::html_escape(piece);
    in.check_size(out.size() + piece.size());
    out += piece;
  }
  return out;
}

}  // namespace strata::tmpl
