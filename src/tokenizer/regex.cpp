#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>
#include <memory>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace strata::tok {

namespace {

// Unicode White_Space, as class items (Oniguruma's and Rust's \s).
constexpr std::string_view kWhitespaceItems =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

[[noreturn]] void unsupported(std::string_view pattern, const std::string& what) {
  throw Error("unsupported regex construct (" + what + ") in pattern: " + std::string(pattern));
}

// Copies an escape sequence starting at p[i] == '\\' and returns the index
// after it. Handles \p{..}, \x{..} and \uHHHH; inside a class \s expands to
// the White_Space items.
std::size_t translate_escape(std::string_view p, std::size_t i, bool in_class, std::string& out) {
  if (i + 1 >= p.size()) unsupported(p, "trailing backslash");
  const char c = p[i + 1];
  if (c == 's') {
    out += in_class ? std::string(kWhitespaceItems) : "[" + std::string(kWhitespaceItems) + "]";
    return i + 2;
  }
  if (c == 'S') {
    if (in_class) unsupported(p, "\\S inside a character class");
    out += "[^" + std::string(kWhitespaceItems) + "]";
    return i + 2;
  }
  if (c == 'h') unsupported(p, "\\h");  // hex digit in Oniguruma, horizontal space in PCRE2
  if (c == 'u' && i + 6 <= p.size() &&
      std::all_of(p.begin() + i + 2, p.begin() + i + 6, [](char h) { return std::isxdigit(static_cast<unsigned char>(h)); })) {
    out += "\\x{" + std::string(p.substr(i + 2, 4)) + "}";
    return i + 6;
  }
  if ((c == 'p' || c == 'P' || c == 'x') && i + 2 < p.size() && p[i + 2] == '{') {
    const std::size_t close = p.find('}', i + 3);
    if (close == std::string_view::npos) unsupported(p, "unterminated \\" + std::string(1, c) + "{");
    out.append(p.substr(i, close + 1 - i));
    return close + 1;
  }
  // Other escapes are copied unchanged. (\d and \w take PCRE2's UCP meaning,
  // close to but not exactly Oniguruma's; the supported patterns use neither.)
  const std::size_t len = 1 + utf8_sequence_length(static_cast<unsigned char>(c));
  out.append(p.substr(i, len));
  return i + len;
}

std::size_t translate_class(std::string_view p, std::size_t i, std::string& out);

// Translates class items (the text between the brackets, or one operand of
// an intersection) into `out`.
void translate_items(std::string_view p, std::string_view items, std::string& out) {
  for (std::size_t i = 0; i < items.size();) {
    if (items[i] == '\\') {
      std::string tmp;
      const std::size_t next = translate_escape(items, i, true, tmp);
      out += tmp;
      i = next;
    } else if (items[i] == '[' && i + 1 < items.size() && items[i + 1] == ':') {
      const std::size_t close = items.find(":]", i + 2);
      if (close == std::string_view::npos) unsupported(p, "unterminated POSIX class");
      out.append(items.substr(i, close + 2 - i));
      i = close + 2;
    } else if (items[i] == '[') {
      unsupported(p, "nested character class union");
    } else {
      out.push_back(items[i++]);
    }
  }
}

// Finds the ']' closing the class that starts at p[open] == '['.
std::size_t class_end(std::string_view p, std::size_t open) {
  std::size_t i = open + 1;
  if (i < p.size() && p[i] == '^') ++i;
  if (i < p.size() && p[i] == ']') ++i;  // a leading ']' is literal
  while (i < p.size()) {
    if (p[i] == '\\') {
      i += 2;
    } else if (p[i] == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      const std::size_t close = p.find(":]", i + 2);
      if (close == std::string_view::npos) unsupported(p, "unterminated POSIX class");
      i = close + 2;
    } else if (p[i] == '[') {
      i = class_end(p, i) + 1;
    } else if (p[i] == ']') {
      return i;
    } else {
      ++i;
    }
  }
  unsupported(p, "unterminated character class");
}

// Emits one operand of an intersection as a standalone PCRE2 class.
void emit_operand(std::string_view p, std::string_view operand, std::string& out) {
  if (!operand.empty() && operand.front() == '[' && class_end(operand, 0) == operand.size() - 1) {
    translate_class(operand, 0, out);
    return;
  }
  out.push_back('[');
  translate_items(p, operand, out);
  out.push_back(']');
}

// Translates the class starting at p[i] == '['; returns the index after it.
std::size_t translate_class(std::string_view p, std::size_t i, std::string& out) {
  const std::size_t end = class_end(p, i);
  std::size_t body = i + 1;
  const bool negated = body < end && p[body] == '^';
  if (negated) ++body;
  // Split the body at top-level "&&".
  std::vector<std::string_view> operands;
  std::size_t start = body;
  for (std::size_t k = body; k < end;) {
    if (p[k] == '\\') {
      k += 2;
    } else if (p[k] == '[' && !(k + 1 < end && p[k + 1] == ':')) {
      k = class_end(p, k) + 1;
    } else if (p[k] == '&' && k + 1 < end && p[k + 1] == '&') {
      operands.push_back(p.substr(start, k - start));
      k += 2;
      start = k;
    } else {
      ++k;
    }
  }
  operands.push_back(p.substr(start, end - start));
  if (operands.size() == 1) {
    out += negated ? "[^" : "[";
    translate_items(p, operands[0], out);
    out.push_back(']');
    return end + 1;
  }
  if (negated) unsupported(p, "negated class intersection");
  // [A&&B&&C] matches one character in all three: look ahead for B and C,
  // then consume it with A.
  out += "(?:";
  for (std::size_t k = 1; k < operands.size(); ++k) {
    out += "(?=";
    emit_operand(p, operands[k], out);
    out += ")";
  }
  emit_operand(p, operands[0], out);
  out += ")";
  return end + 1;
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data_8* md) const { pcre2_match_data_free(md); }
};

// One match-data block per thread: only the whole-match offsets are read.
pcre2_match_data_8* thread_match_data() {
  thread_local std::unique_ptr<pcre2_match_data_8, MatchDataDeleter> md(pcre2_match_data_create(1, nullptr));
  return md.get();
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

std::string translate_pattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() * 2);
  for (std::size_t i = 0; i < p.size();) {
    if (p[i] == '\\') {
      i = translate_escape(p, i, false, out);
    } else if (p[i] == '[') {
      i = translate_class(p, i, out);
    } else {
      out.push_back(p[i++]);
    }
  }
  return out;
}

std::string escape_literal(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

Regex::Regex(std::string_view pattern, std::string_view origin) : origin_(origin) {
  try {
    translated_ = translate_pattern(pattern);
  } catch (const Error& e) {
    throw Error(origin_ + ": " + e.what());
  }
  int err = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated_.data()), translated_.size(),
                        PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (!code_)
    throw Error(origin_ + ": regex does not compile (" + pcre2_message(err) + " at offset " + std::to_string(offset) +
                " of translated pattern " + translated_ + ")");
  // JIT is a large speed-up; without it (unsupported CPU) the interpreter is used.
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() { pcre2_code_free(code_); }

void Regex::find_all(std::string_view subject, std::vector<std::pair<std::size_t, std::size_t>>& out) const {
  find_each(subject, [&](std::size_t b, std::size_t e) {
    out.emplace_back(b, e);
    return true;
  });
}

bool Regex::find_each(std::string_view subject, const std::function<bool(std::size_t, std::size_t)>& on_match) const {
  auto* md = thread_match_data();
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const std::size_t n = subject.size();
  std::size_t start = 0;
  std::size_t last_end = std::string_view::npos;  // end of the last non-empty match
  while (start <= n) {
    // Input was validated once up front, so skip PCRE2's per-call UTF check
    // (it would rescan the whole subject on every call).
    int rc = pcre2_match(code_, s, n, start, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = pcre2_match(code_, s, n, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw Error(origin_ + ": regex match failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const std::size_t b = ov[0], e = ov[1];
    if (e > b) {
      if (!on_match(b, e)) return false;
      start = last_end = e;
      continue;
    }
    // Empty match: report it (it is still a split point) and step one
    // character, as Oniguruma's and Rust's iterators do.
    if (b != last_end && !on_match(b, b)) return false;
    if (b >= n) break;
    start = b + utf8_sequence_length(static_cast<unsigned char>(subject[b]));
  }
  return true;
}

}  // namespace strata::tok
