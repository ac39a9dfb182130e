#pragma once
// Python `str` semantics over UTF-8 bytes, for the template interpreter:
// code-point indexing, str.isspace / strip / split / splitlines / replace,
// case mapping, repr() of strings and floats, HTML escaping (Markup).
//
// Decoding is lenient: a byte that does not start a well-formed sequence
// decodes to kRawByteBase + byte and encodes back to that same byte, so text
// from any source passes through slicing unchanged and nothing here throws on
// malformed input.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::tmpl::text {

inline constexpr char32_t kRawByteBase = 0x110000;

// Decodes the code point at s[i] and advances i (always by at least one byte).
char32_t next(std::string_view s, std::size_t& i);
void append(std::string& out, char32_t cp);
std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
std::size_t length(std::string_view s);  // in code points

// Python str.isspace() for one character (Unicode White_Space plus U+001C..U+001F).
bool is_space(char32_t cp);
bool is_printable(char32_t cp);  // str.isprintable(), close approximation
bool is_alpha(char32_t cp);
bool is_digit(char32_t cp);
bool is_alnum(char32_t cp);
bool is_word(char32_t cp);  // regex \w
bool is_upper(char32_t cp);
bool is_lower(char32_t cp);
char32_t to_upper(char32_t cp);
char32_t to_lower(char32_t cp);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string swapcase(std::string_view s);
std::string capitalize(std::string_view s);  // str.capitalize
std::string title(std::string_view s);       // str.title
bool str_isupper(std::string_view s);
bool str_islower(std::string_view s);

// str.strip / lstrip / rstrip; chars == nullopt strips whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split / rsplit; sep == nullopt splits on whitespace runs. maxsplit < 0: no limit.
// sep must not be empty (the caller raises ValueError).
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
std::string replace(std::string_view s, std::string_view old, std::string_view neu, int64_t count);
int64_t count(std::string_view s, std::string_view sub);
// Code-point index of the first / last occurrence, or -1.
int64_t find(std::string_view s, std::string_view sub);
int64_t rfind(std::string_view s, std::string_view sub);

// Python repr() of a str: quotes chosen as Python does, escapes for
// backslash, the quote, \t \n \r and non-printable characters.
std::string repr(std::string_view s);
// Python repr() / str() of a float: shortest round-trip digits, "1.0",
// "1e+16", "1e-05", "inf", "nan".
std::string float_repr(double d);
// markupsafe.escape: & < > " ' -> &amp; &lt; &gt; &#34; &#39;
std::string html_escape(std::string_view s);

}  // namespace strata::tmpl::text
