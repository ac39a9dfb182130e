#pragma once
// Unicode Normalization Form C, for tokenizer.json normalizers of type "NFC"
// (Qwen3 has one). Tables come from Python's unicodedata at generation time,
// Unicode 14 — the same version as the PCRE2 the pre-tokenizer regexes use.
#include <string>
#include <string_view>

namespace strata::tok {

// NFC of valid UTF-8 text. Returns the input unchanged (cheaply) when it holds
// no character at or above U+0300, the first one NFC can affect.
std::string nfc_normalize(std::string_view text);

}  // namespace strata::tok
