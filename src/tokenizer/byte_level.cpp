#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace strata::tok {

namespace {

struct Tables {
  std::array<char32_t, 256> to_unicode{};
  std::array<int, 0x144> to_byte{};  // stand-ins are all below U+0144
  Tables() {
    to_byte.fill(-1);
    auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      to_unicode[b] = cp;
      to_byte[cp] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_unicode(unsigned char b) { return tables().to_unicode[b]; }

std::optional<unsigned char> unicode_to_byte(char32_t cp) {
  if (cp >= tables().to_byte.size() || tables().to_byte[cp] < 0) return std::nullopt;
  return static_cast<unsigned char>(tables().to_byte[cp]);
}

std::string to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(out, byte_to_unicode(static_cast<unsigned char>(c)));
  return out;
}

std::optional<std::string> from_byte_level(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    auto b = unicode_to_byte(next_code_point(text, i));
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
  }
  return out;
}

}  // namespace strata::tok
