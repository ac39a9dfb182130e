#pragma once
// UTF-8 helpers shared by the tokenizer. Input text is validated once at the
// front door (validate_utf8); everything downstream may then assume
// well-formed UTF-8 and decode without re-checking.
#include <cstddef>
#include <string>
#include <string_view>

namespace strata::tok {

// Throws strata::Error ("invalid UTF-8 in <what> at byte offset N: <problem>")
// on the first malformed sequence: stray continuation byte, truncated
// sequence, overlong form, surrogate, or a value above U+10FFFF.
void validate_utf8(std::string_view text, std::string_view what = "input text");

// Decodes the code point starting at s[i] and advances i past it. s must be
// valid UTF-8 (see validate_utf8) and i < s.size().
char32_t next_code_point(std::string_view s, std::size_t& i);

// Appends the UTF-8 encoding of cp.
void append_utf8(std::string& out, char32_t cp);

// Length of the UTF-8 sequence whose lead byte is b (1 for bytes that are not
// valid lead bytes, so a scan always advances).
std::size_t utf8_sequence_length(unsigned char b);

// Unicode White_Space: the set HF tokenizers (Rust char::is_whitespace) and
// Oniguruma's \s use.
bool is_unicode_whitespace(char32_t cp);

}  // namespace strata::tok
