#include "template/text.h"

#include <locale.h>
#include <wctype.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace strata::tmpl::text {

char32_t next(std::string_view s, std::size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  std::size_t len = 0;
  char32_t cp = 0, min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  }
  if (len == 0 || i + len > s.size()) {
    ++i;
    return kRawByteBase + b0;
  }
  for (std::size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return kRawByteBase + b0;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF) {
    ++i;
    return kRawByteBase + b0;
  }
  i += len;
  return cp;
}

void append(std::string& out, char32_t cp) {
  if (cp >= kRawByteBase) {
    out += static_cast<char>(cp - kRawByteBase);
  } else if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) out += next(s, i);
  return out;
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append(out, c);
  return out;
}

std::size_t length(std::string_view s) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.size(); ++n) next(s, i);
  return n;
}

bool is_space(char32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_printable(char32_t c) {
  if (c >= kRawByteBase) return false;
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  if (c <= 0xA0 || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x2064) || (c >= 0x2066 && c <= 0x206F) || c == 0x3000 || c == 0xFEFF ||
      (c >= 0xFFF9 && c <= 0xFFFB))
    return false;
  if (c >= 0xD800 && c <= 0xDFFF) return false;                     // surrogates
  if ((c >= 0xE000 && c <= 0xF8FF) || c >= 0xF0000) return false;  // private use
  if (c == 0x61C || c == 0x180E || (c >= 0x600 && c <= 0x605) || c == 0x6DD || c == 0x70F) return false;
  if ((c >= 0xE0000 && c <= 0xE007F) || (c >= 0x1D173 && c <= 0x1D17A)) return false;
  return true;
}

namespace {

locale_t utf8_locale() {
  static const locale_t loc = [] {
    locale_t l = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
    if (!l) l = newlocale(LC_CTYPE_MASK, "C.utf8", static_cast<locale_t>(nullptr));
    return l;
  }();
  return loc;
}

bool is_ascii_alpha(char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

}  // namespace

bool is_alpha(char32_t c) {
  if (c < 0x80) return is_ascii_alpha(c);
  if (c >= kRawByteBase) return false;
  locale_t l = utf8_locale();
  return l && iswalpha_l(static_cast<wint_t>(c), l);
}

bool is_digit(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  if (c >= kRawByteBase) return false;
  locale_t l = utf8_locale();
  return l && iswdigit_l(static_cast<wint_t>(c), l);
}

bool is_alnum(char32_t c) { return is_alpha(c) || is_digit(c); }
bool is_word(char32_t c) { return c == '_' || is_alnum(c); }

char32_t to_upper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  if (c >= kRawByteBase) return c;
  locale_t l = utf8_locale();
  return l ? static_cast<char32_t>(towupper_l(static_cast<wint_t>(c), l)) : c;
}

char32_t to_lower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if (c >= kRawByteBase) return c;
  locale_t l = utf8_locale();
  return l ? static_cast<char32_t>(towlower_l(static_cast<wint_t>(c), l)) : c;
}

bool is_upper(char32_t c) { return to_lower(c) != c; }
bool is_lower(char32_t c) { return to_upper(c) != c; }

namespace {
bool is_cased(char32_t c) { return is_upper(c) || is_lower(c); }

template <class F>
std::string map_chars(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) append(out, f(next(s, i)));
  return out;
}
}  // namespace

std::string upper(std::string_view s) { return map_chars(s, to_upper); }
std::string lower(std::string_view s) { return map_chars(s, to_lower); }
std::string swapcase(std::string_view s) {
  return map_chars(s, [](char32_t c) { return is_upper(c) ? to_lower(c) : to_upper(c); });
}

std::string capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (std::size_t i = 0; i < s.size();) {
    const char32_t c = next(s, i);
    append(out, first ? to_upper(c) : to_lower(c));
    first = false;
  }
  return out;
}

std::string title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (std::size_t i = 0; i < s.size();) {
    const char32_t c = next(s, i);
    const bool cased = is_cased(c);
    append(out, cased ? (prev_cased ? to_lower(c) : to_upper(c)) : c);
    prev_cased = cased;
  }
  return out;
}

bool str_isupper(std::string_view s) {
  bool any = false;
  for (std::size_t i = 0; i < s.size();) {
    const char32_t c = next(s, i);
    if (is_lower(c)) return false;
    if (is_upper(c)) any = true;
  }
  return any;
}

bool str_islower(std::string_view s) {
  bool any = false;
  for (std::size_t i = 0; i < s.size();) {
    const char32_t c = next(s, i);
    if (is_upper(c)) return false;
    if (is_lower(c)) any = true;
  }
  return any;
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string cps = decode(s);
  std::u32string set;
  if (chars) set = decode(*chars);
  auto strippable = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_space(c); };
  std::size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strippable(cps[b])) ++b;
  if (right)
    while (e > b && strippable(cps[e - 1])) --e;
  return encode(std::u32string_view(cps).substr(b, e - b));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    std::size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const std::size_t f = s.find(*sep, pos);
      if (f == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, f - pos));
      pos = f + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  const std::u32string cps = decode(s);
  std::size_t i = 0;
  const std::size_t n = cps.size();
  while (true) {
    while (i < n && is_space(cps[i])) ++i;
    if (i >= n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      out.push_back(encode(std::u32string_view(cps).substr(i)));  // Python keeps trailing space
      break;
    }
    std::size_t j = i;
    while (j < n && !is_space(cps[j])) ++j;
    out.push_back(encode(std::u32string_view(cps).substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (maxsplit < 0) return split(s, sep, maxsplit);
  if (sep) {
    std::size_t end = s.size();
    while (static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      const std::size_t f = s.rfind(*sep, end - sep->size());
      if (f == std::string_view::npos) break;
      out.emplace_back(s.substr(f + sep->size(), end - f - sep->size()));
      end = f;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    const std::u32string cps = decode(s);
    std::size_t e = cps.size();
    while (true) {
      while (e > 0 && is_space(cps[e - 1])) --e;
      if (e == 0) break;
      if (static_cast<int64_t>(out.size()) >= maxsplit) {
        out.push_back(encode(std::u32string_view(cps).substr(0, e)));  // leading space kept
        break;
      }
      std::size_t b = e;
      while (b > 0 && !is_space(cps[b - 1])) --b;
      out.push_back(encode(std::u32string_view(cps).substr(b, e - b)));
      e = b;
    }
  }
  return {out.rbegin(), out.rend()};
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  const std::u32string cps = decode(s);
  const std::size_t n = cps.size();
  std::size_t start = 0, i = 0;
  while (i < n) {
    const char32_t c = cps[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                     c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    std::size_t eol = i + 1;
    if (c == '\r' && eol < n && cps[eol] == '\n') ++eol;
    out.push_back(encode(std::u32string_view(cps).substr(start, (keepends ? eol : i) - start)));
    start = i = eol;
  }
  if (start < n) out.push_back(encode(std::u32string_view(cps).substr(start)));
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view neu, int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts `neu` before every code point and at the end.
    int64_t done = 0;
    std::size_t i = 0;
    while (i < s.size()) {
      if (count < 0 || done < count) {
        out += neu;
        ++done;
      }
      const std::size_t b = i;
      next(s, i);
      out += s.substr(b, i - b);
    }
    if (count < 0 || done < count) out += neu;
    return out;
  }
  std::size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const std::size_t f = s.find(old, pos);
    if (f == std::string_view::npos) break;
    out += s.substr(pos, f - pos);
    out += neu;
    pos = f + old.size();
    ++done;
  }
  out += s.substr(pos);
  return out;
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(length(s)) + 1;
  int64_t n = 0;
  for (std::size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

int64_t find(std::string_view s, std::string_view sub) {
  const std::size_t f = s.find(sub);
  return f == std::string_view::npos ? -1 : static_cast<int64_t>(length(s.substr(0, f)));
}

int64_t rfind(std::string_view s, std::string_view sub) {
  const std::size_t f = s.rfind(sub);
  return f == std::string_view::npos ? -1 : static_cast<int64_t>(length(s.substr(0, f)));
}

std::string repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  char buf[16];
  for (std::size_t i = 0; i < s.size();) {
    const char32_t c = next(s, i);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c >= kRawByteBase) {
      // Python would hold a surrogate-escaped byte here; show it as \x.. too.
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c - kRawByteBase));
      out += buf;
    } else if (is_printable(c)) {
      append(out, c);
    } else if (c < 0x100) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else if (c < 0x10000) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    }
  }
  out += quote;
  return out;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  // Shortest round-trip digits in scientific form: [-]d[.ddd]e[+-]xx
  const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string out;
  if (sci[0] == '-') {
    out += '-';
    sci.erase(0, 1);
  }
  const std::size_t epos = sci.find('e');
  const int exp = std::atoi(sci.c_str() + epos + 1);
  std::string digits;
  for (std::size_t k = 0; k < epos; ++k)
    if (sci[k] != '.') digits += sci[k];
  const int decpt = exp + 1;  // value = 0.DIGITS * 10^decpt
  const int nd = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<std::size_t>(-decpt), '0');
      out += digits;
    } else if (decpt >= nd) {
      out += digits;
      out.append(static_cast<std::size_t>(decpt - nd), '0');
      out += ".0";
    } else {
      out += digits.substr(0, static_cast<std::size_t>(decpt));
      out += '.';
      out += digits.substr(static_cast<std::size_t>(decpt));
    }
    return out;
  }
  out += digits[0];
  if (nd > 1) {
    out += '.';
    out += digits.substr(1);
  }
  std::snprintf(buf, sizeof buf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  out += buf;
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace strata::tmpl::text
