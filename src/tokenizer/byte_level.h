#pragma once
// GPT-2's byte-level alphabet: every byte value is given a printable Unicode
// stand-in so byte-level BPE vocabularies can be stored as text. Printable
// Latin-1 bytes map to themselves; the other 68 bytes map to U+0100..U+0143.
// "Ġ" (U+0120) is the stand-in for the space byte.
#include <optional>
#include <string>
#include <string_view>

namespace strata::tok {

// The stand-in code point for byte b.
char32_t byte_to_unicode(unsigned char b);

// The byte a stand-in code point represents, or nullopt if cp is not one.
std::optional<unsigned char> unicode_to_byte(char32_t cp);

// Raw bytes -> byte-level text (always valid UTF-8).
std::string to_byte_level(std::string_view bytes);

// Byte-level text (valid UTF-8) -> raw bytes; nullopt if any character is not
// in the alphabet (e.g. a special token such as "<｜begin▁of▁sentence｜>").
std::optional<std::string> from_byte_level(std::string_view text);

}  // namespace strata::tok
