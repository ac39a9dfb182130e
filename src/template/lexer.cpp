#include "template/lexer.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "template/error.h"
#include "template/text.h"

namespace strata::tmpl {

const char* describe(TokenType type) {
  switch (type) {
    case TokenType::Data: return "template data";
    case TokenType::VarBegin: return "begin of print statement";
    case TokenType::VarEnd: return "end of print statement";
    case TokenType::BlockBegin: return "begin of statement block";
    case TokenType::BlockEnd: return "end of statement block";
    case TokenType::Name: return "name";
    case TokenType::String: return "string";
    case TokenType::Integer: return "integer";
    case TokenType::Float: return "float";
    case TokenType::Operator: return "operator";
    case TokenType::Eof: return "end of template";
  }
  return "token";
}

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    // Newlines: "\r\n" and "\r" become "\n"; one trailing newline is dropped.
    src_.reserve(source.size());
    for (std::size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    std::size_t pos = 0;
    bool line_starting = true;
    const std::size_t n = src_.size();
    while (pos < n) {
      // Next tag opener: {{ {% {#
      std::size_t p = pos;
      char kind = 0;
      while (true) {
        p = src_.find('{', p);
        if (p == std::string::npos || p + 1 >= n) {
          p = std::string::npos;
          break;
        }
        const char c = src_[p + 1];
        if (c == '{' || c == '%' || c == '#') {
          kind = c;
          break;
        }
        ++p;
      }
      if (p == std::string::npos) {
        emit_data(src_.substr(pos), pos);
        break;
      }
      std::size_t after = p + 2;
      char sign = 0;
      if (after < n && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];

      std::size_t raw_end = 0;
      const bool raw = kind == '%' && match_raw_begin(p, raw_end);

      std::string text = src_.substr(pos, p - pos);
      strip_before_tag(text, sign, kind == '{', line_starting);
      emit_data(std::move(text), pos);

      if (raw) {
        pos = raw_body(raw_end);
        line_starting = pos > 0 && src_[pos - 1] == '\n';
      } else if (kind == '#') {
        pos = comment_end(after, p);
        line_starting = src_[pos - 1] == '\n';
      } else {
        line_starting = false;
        pos = tag(kind == '{', after, p, line_starting);
      }
    }
    push(TokenType::Eof, {}, n);
    return std::move(tokens_);
  }

 private:
  int line_at(std::size_t pos) {
    // Positions only move forward except for the few look-backs of a token
    // start; count newlines incrementally from the last position asked.
    if (pos < line_pos_) {
      line_pos_ = 0;
      line_ = 1;
    }
    for (; line_pos_ < pos && line_pos_ < src_.size(); ++line_pos_)
      if (src_[line_pos_] == '\n') ++line_;
    return line_;
  }

  [[noreturn]] void fail(const std::string& msg, std::size_t pos) { syntax_error(msg, line_at(pos)); }

  void push(TokenType type, std::string value, std::size_t pos) {
    Token t;
    t.type = type;
    t.value = std::move(value);
    t.line = line_at(pos);
    tokens_.push_back(std::move(t));
  }

  void emit_data(std::string text, std::size_t pos) {
    if (!text.empty()) push(TokenType::Data, std::move(text), pos);
  }

  // Python whitespace (regex \s) starting at pos; returns the end.
  std::size_t skip_ws(std::size_t pos) const {
    while (pos < src_.size()) {
      std::size_t i = pos;
      if (!text::is_space(text::next(src_, i))) break;
      pos = i;
    }
    return pos;
  }

  static bool all_space(std::string_view s) {
    if (s.empty()) return false;
    for (std::size_t i = 0; i < s.size();)
      if (!text::is_space(text::next(s, i))) return false;
    return true;
  }

  static std::size_t rstrip_len(std::string_view s) {
    std::size_t keep = 0;
    for (std::size_t i = 0; i < s.size();) {
      if (!text::is_space(text::next(s, i))) keep = i;
    }
    return keep;
  }

  // The data before a tag: "-" strips all whitespace; otherwise lstrip_blocks
  // removes the indentation of a block tag or comment that starts its line.
  static void strip_before_tag(std::string& text, char sign, bool is_variable, bool line_starting) {
    if (sign == '-') {
      text.resize(rstrip_len(text));
    } else if (sign != '+' && !is_variable) {
      const std::size_t nl = text.rfind('\n');
      const std::size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting) && all_space(std::string_view(text).substr(l_pos))) text.resize(l_pos);
    }
  }

  bool starts_with(std::size_t pos, std::string_view s) const { return src_.compare(pos, s.size(), s) == 0; }

  bool match_word(std::size_t& pos, std::string_view word) const {
    if (!starts_with(pos, word)) return false;
    pos += word.size();
    return true;
  }

  // {%[-+]?\s*raw\s*(-%}\s*|%})
  bool match_raw_begin(std::size_t p, std::size_t& end) const {
    std::size_t i = p + 2;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    i = skip_ws(i);
    if (!match_word(i, "raw")) return false;
    i = skip_ws(i);
    if (starts_with(i, "-%}")) {
      end = skip_ws(i + 3);
      return true;
    }
    if (starts_with(i, "%}")) {
      end = i + 2;
      return true;
    }
    return false;
  }

  // The body of {% raw %}: data up to {% endraw %}, which takes the usual
  // whitespace control. Returns the position after the end tag.
  std::size_t raw_body(std::size_t start) {
    const bool line_starting = start > 0 && src_[start - 1] == '\n';
    for (std::size_t p = src_.find("{%", start); p != std::string::npos; p = src_.find("{%", p + 1)) {
      std::size_t i = p + 2;
      char sign = 0;
      if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) sign = src_[i++];
      i = skip_ws(i);
      if (!match_word(i, "endraw")) continue;
      i = skip_ws(i);
      std::size_t end;
      if (starts_with(i, "+%}")) {
        end = i + 3;
      } else if (starts_with(i, "-%}")) {
        end = skip_ws(i + 3);
      } else if (starts_with(i, "%}")) {
        end = i + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      } else {
        continue;
      }
      std::string text = src_.substr(start, p - start);
      strip_before_tag(text, sign, false, line_starting);
      emit_data(std::move(text), start);
      return end;
    }
    fail("Missing end of raw directive", start);
  }

  std::size_t comment_end(std::size_t start, std::size_t open) {
    const std::size_t q = src_.find("#}", start);
    if (q == std::string::npos) fail("Missing end of comment tag", open);
    if (q > start && src_[q - 1] == '-') return skip_ws(q + 2);
    if (q > start && src_[q - 1] == '+') return q + 2;
    std::size_t end = q + 2;
    if (end < src_.size() && src_[end] == '\n') ++end;
    return end;
  }

  // Tokens of a {{ }} or {% %} tag, from pos; returns the position after the
  // closing delimiter (or the end of the source, leaving Eof to the parser).
  std::size_t tag(bool variable, std::size_t pos, std::size_t open, bool& line_starting) {
    push(variable ? TokenType::VarBegin : TokenType::BlockBegin, {}, open);
    std::vector<char> balance;
    const std::size_t n = src_.size();
    while (pos < n) {
      if (balance.empty()) {
        std::size_t end = 0;
        if (variable) {
          if (starts_with(pos, "-}}")) end = skip_ws(pos + 3);
          else if (starts_with(pos, "}}")) end = pos + 2;
        } else {
          if (starts_with(pos, "+%}")) {
            end = pos + 3;
          } else if (starts_with(pos, "-%}")) {
            end = skip_ws(pos + 3);
          } else if (starts_with(pos, "%}")) {
            end = pos + 2;
            if (end < n && src_[end] == '\n') ++end;
          }
        }
        if (end) {
          push(variable ? TokenType::VarEnd : TokenType::BlockEnd, {}, pos);
          line_starting = src_[end - 1] == '\n';
          return end;
        }
      }
      const std::size_t ws = skip_ws(pos);
      if (ws != pos) {
        pos = ws;
        continue;
      }
      if (std::size_t e = number(pos); e != pos) {
        pos = e;
        continue;
      }
      if (std::size_t e = name(pos); e != pos) {
        pos = e;
        continue;
      }
      const char c = src_[pos];
      if (c == '\'' || c == '"') {
        pos = string(pos);
        continue;
      }
      pos = op(pos, balance);
    }
    return pos;
  }

  // (\d+_)*\d+ from pos; returns the end, or pos when there is no digit.
  std::size_t digits(std::size_t pos) const {
    std::size_t i = pos;
    if (i >= src_.size() || !is_digit(src_[i])) return pos;
    while (true) {
      while (i < src_.size() && is_digit(src_[i])) ++i;
      if (i + 1 < src_.size() && src_[i] == '_' && is_digit(src_[i + 1])) {
        ++i;
        continue;
      }
      return i;
    }
  }

  std::size_t exponent(std::size_t pos) const {
    if (pos >= src_.size() || (src_[pos] != 'e' && src_[pos] != 'E')) return pos;
    std::size_t i = pos + 1;
    if (i < src_.size() && (src_[i] == '+' || src_[i] == '-')) ++i;
    const std::size_t e = digits(i);
    return e == i ? pos : e;
  }

  std::size_t number(std::size_t pos) {
    if (!is_digit(src_[pos])) return pos;
    // float_re first: not right after a '.', digits, then fraction and/or exponent.
    if (pos == 0 || src_[pos - 1] != '.') {
      const std::size_t int_end = digits(pos);
      std::size_t end = 0;
      if (int_end < src_.size() && src_[int_end] == '.') {
        const std::size_t frac_end = digits(int_end + 1);
        if (frac_end != int_end + 1) {
          const std::size_t exp_end = exponent(frac_end);
          end = exp_end != frac_end ? exp_end : frac_end;
        }
      } else {
        const std::size_t exp_end = exponent(int_end);
        if (exp_end != int_end) end = exp_end;
      }
      if (end) {
        std::string lit;
        for (std::size_t k = pos; k < end; ++k)
          if (src_[k] != '_') lit += src_[k];
        push(TokenType::Float, src_.substr(pos, end - pos), pos);
        tokens_.back().fval = std::strtod(lit.c_str(), nullptr);
        return end;
      }
    }
    // integer_re: 0b.. 0o.. 0x.. [1-9](_?\d)* 0(_?0)*
    std::size_t end = pos;
    int base = 10;
    auto prefixed = [&](char p, auto valid) {
      if (pos + 1 < src_.size() && (src_[pos + 1] == p || src_[pos + 1] == p - 32)) {
        std::size_t i = pos + 2;
        while (true) {
          if (i < src_.size() && valid(src_[i])) {
            ++i;
          } else if (i + 1 < src_.size() && src_[i] == '_' && valid(src_[i + 1])) {
            i += 2;
          } else {
            break;
          }
        }
        if (i > pos + 2) return i;
      }
      return pos;
    };
    if (src_[pos] == '0') {
      if ((end = prefixed('b', [](char c) { return c == '0' || c == '1'; })) != pos) base = 2;
      else if ((end = prefixed('o', [](char c) { return c >= '0' && c <= '7'; })) != pos) base = 8;
      else if ((end = prefixed('x', is_hex)) != pos) base = 16;
      else {
        end = pos + 1;
        while (true) {
          if (end < src_.size() && src_[end] == '0') ++end;
          else if (end + 1 < src_.size() && src_[end] == '_' && src_[end + 1] == '0') end += 2;
          else break;
        }
      }
    } else {
      end = digits(pos);
    }
    std::string lit;
    for (std::size_t k = base == 10 ? pos : pos + 2; k < end; ++k)
      if (src_[k] != '_') lit += src_[k];
    errno = 0;
    const long long v = std::strtoll(lit.c_str(), nullptr, base);
    if (errno == ERANGE) fail("integer literal " + src_.substr(pos, end - pos) + " is too large", pos);
    push(TokenType::Integer, src_.substr(pos, end - pos), pos);
    tokens_.back().ival = v;
    return end;
  }

  std::size_t name(std::size_t pos) {
    std::size_t i = pos;
    bool first = true;
    while (i < src_.size()) {
      std::size_t k = i;
      const char32_t c = text::next(src_, k);
      const bool ascii_alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
      const bool ok = c == '_' || ascii_alpha || (!first && c >= '0' && c <= '9') || (c >= 0x80 && text::is_word(c));
      if (!ok) break;
      i = k;
      first = false;
    }
    if (i != pos) push(TokenType::Name, src_.substr(pos, i - pos), pos);
    return i;
  }

  std::size_t string(std::size_t pos) {
    const char quote = src_[pos];
    std::size_t i = pos + 1;
    while (i < src_.size() && src_[i] != quote) i += src_[i] == '\\' ? 2 : 1;
    if (i >= src_.size()) fail(std::string("unexpected char '") + quote + "'", pos);
    push(TokenType::String, unescape(std::string_view(src_).substr(pos + 1, i - pos - 1), pos), pos);
    return i + 1;
  }

  // Python's "unicode-escape" codec applied after "backslashreplace", which is
  // what jinja2 does to a string literal.
  std::string unescape(std::string_view raw, std::size_t pos) {
    std::string out;
    char buf[16];
    for (std::size_t i = 0; i < raw.size();) {
      const std::size_t start = i;
      const char32_t c = text::next(raw, i);
      if (c != '\\') {
        out.append(raw, start, i - start);
        continue;
      }
      if (i >= raw.size()) {
        out += '\\';
        break;
      }
      const std::size_t d_start = i;
      const char32_t d = text::next(raw, i);
      if (d >= 0x80) {
        // backslashreplace turned d into \xNN / \uNNNN / \UNNNNNNNN; the
        // backslash before it escapes that backslash, so the digits stay.
        if (d >= text::kRawByteBase) std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(d - text::kRawByteBase));
        else if (d < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(d));
        else if (d < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(d));
        else std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(d));
        out += buf;
        continue;
      }
      auto hex = [&](int count, const char* what) -> char32_t {
        char32_t v = 0;
        for (int k = 0; k < count; ++k) {
          if (i >= raw.size() || !is_hex(raw[i])) fail(std::string("truncated ") + what + " escape", pos);
          const char h = raw[i++];
          v = v * 16 + static_cast<char32_t>(is_digit(h) ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        return v;
      };
      switch (d) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': text::append(out, hex(2, "\\xXX")); break;
        case 'u': text::append(out, hex(4, "\\uXXXX")); break;
        case 'U': {
          const char32_t v = hex(8, "\\UXXXXXXXX");
          if (v > 0x10FFFF) fail("illegal Unicode character", pos);
          text::append(out, v);
          break;
        }
        case 'N': fail("\\N{...} escapes are not supported", pos);
        default:
          if (d >= '0' && d <= '7') {
            char32_t v = d - '0';
            for (int k = 0; k < 2 && i < raw.size() && raw[i] >= '0' && raw[i] <= '7'; ++k) v = v * 8 + (raw[i++] - '0');
            text::append(out, v);
          } else {
            out += '\\';
            out.append(raw, d_start, i - d_start);
          }
      }
    }
    return out;
  }

  std::size_t op(std::size_t pos, std::vector<char>& balance) {
    static const char* const kTwo[] = {"**", "//", "==", "!=", ">=", "<="};
    for (const char* two : kTwo)
      if (starts_with(pos, two)) {
        push(TokenType::Operator, two, pos);
        return pos + 2;
      }
    const char c = src_[pos];
    static const std::string_view kOne = "+-/*%~[](){}><=.:|,;";
    if (kOne.find(c) == std::string_view::npos) {
      std::size_t k = pos;
      const char32_t cp = text::next(src_, k);
      std::string shown;
      text::append(shown, cp);
      fail("unexpected char '" + shown + "'", pos);
    }
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) fail(std::string("unexpected '") + c + "'", pos);
      const char expected = balance.back();
      balance.pop_back();
      if (expected != c) fail(std::string("unexpected '") + c + "', expected '" + expected + "'", pos);
    }
    push(TokenType::Operator, std::string(1, c), pos);
    return pos + 1;
  }

  std::string src_;
  std::vector<Token> tokens_;
  std::size_t line_pos_ = 0;
  int line_ = 1;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace strata::tmpl
