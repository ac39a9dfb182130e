#pragma once
// PCRE2 (8-bit, UTF + UCP) wrapper for the pre-tokenizer patterns. The
// patterns are written for Oniguruma (HF tokenizers) or Rust's regex crate
// (tiktoken); translate_pattern() rewrites the few constructs whose meaning
// differs in PCRE2 so that matches come out identical.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct pcre2_real_code_8;

namespace strata::tok {

// Rewrites an Oniguruma / Rust-regex pattern into PCRE2 syntax:
//  * \s and \S become explicit Unicode White_Space classes (PCRE2's UCP \s
//    also matches U+180E, which the other engines do not);
//  * class intersection [A&&[^B]] (Rust; Kimi's pat_str) becomes
//    (?:(?=[^B])[A]), one lookahead per extra operand;
//  * \uHHHH (Oniguruma) becomes \x{HHHH}.
// Throws strata::Error for constructs it cannot translate faithfully.
std::string translate_pattern(std::string_view pattern);

// A pattern that matches `literal` exactly (for Split patterns given as
// {"String": ...}).
std::string escape_literal(std::string_view literal);

class Regex {
 public:
  // `pattern` in Oniguruma/Rust syntax; `origin` names where it came from for
  // error messages (e.g. "tokenizer.json pre_tokenizer[1]").
  Regex(std::string_view pattern, std::string_view origin);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends [begin, end) of every successive leftmost-first match in subject
  // (valid UTF-8; the subject's own ends are the regex's text boundaries).
  void find_all(std::string_view subject, std::vector<std::pair<std::size_t, std::size_t>>& out) const;
  // The same matches handed to `on_match(begin, end)` one at a time, until it
  // returns false (then false): a long subject needs no list of them all.
  bool find_each(std::string_view subject, const std::function<bool(std::size_t, std::size_t)>& on_match) const;

  const std::string& pcre2_pattern() const { return translated_; }

 private:
  pcre2_real_code_8* code_ = nullptr;
  std::string translated_;
  std::string origin_;
};

}  // namespace strata::tok
