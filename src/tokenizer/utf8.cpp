#include "tokenizer/utf8.h"

#include <cstdio>

#include "util/error.h"

namespace strata::tok {

namespace {

[[noreturn]] void fail(std::string_view what, std::size_t offset, const std::string& problem) {
  throw Error("invalid UTF-8 in " + std::string(what) + " at byte offset " + std::to_string(offset) + ": " +
              problem);
}

std::string hex_byte(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", b);
  return buf;
}

}  // namespace

std::size_t utf8_sequence_length(unsigned char b) {
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) return 2;
  if ((b & 0xF0) == 0xE0) return 3;
  if ((b & 0xF8) == 0xF0) return 4;
  return 1;
}

void validate_utf8(std::string_view s, std::string_view what) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char b = p[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    char32_t cp;
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
      cp = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      len = 3;
      cp = b & 0x0F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      cp = b & 0x07;
    } else if ((b & 0xC0) == 0x80) {
      fail(what, i, "unexpected continuation byte " + hex_byte(b));
    } else if (b == 0xC0 || b == 0xC1) {
      fail(what, i, "overlong encoding (lead byte " + hex_byte(b) + ")");
    } else {
      fail(what, i, "byte " + hex_byte(b) + " never appears in UTF-8");
    }
    for (std::size_t k = 1; k < len; ++k) {
      if (i + k >= n) fail(what, i, "truncated " + std::to_string(len) + "-byte sequence at end of text");
      const unsigned char c = p[i + k];
      if ((c & 0xC0) != 0x80)
        fail(what, i, "truncated " + std::to_string(len) + "-byte sequence (byte " + hex_byte(c) + " at offset " +
                          std::to_string(i + k) + " is not a continuation byte)");
      cp = (cp << 6) | (c & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) fail(what, i, "overlong encoding");
    if (cp >= 0xD800 && cp <= 0xDFFF) fail(what, i, "encoded surrogate code point");
    if (cp > 0x10FFFF) fail(what, i, "code point above U+10FFFF");
    i += len;
  }
}

char32_t next_code_point(std::string_view s, std::size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const std::size_t len = utf8_sequence_length(b);
  char32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  for (std::size_t k = 1; k < len && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += len;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_unicode_whitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

}  // namespace strata::tok
