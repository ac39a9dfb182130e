// jinja2's number filters: int and float (with Python's int(str, base) and
// float(str) parsing), abs and round.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "template/error.h"
#include "template/filters_internal.h"
#include "template/interpreter.h"
#include "template/text.h"

namespace strata::tmpl::detail {

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

}  // namespace strata::tmpl::detail
