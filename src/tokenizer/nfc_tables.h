#pragma once
// Unicode data for NFC (generated into nfc_tables.cpp by
// tools/tokenizer_reference/gen_nfc_tables.py).
#include <cstddef>
#include <cstdint>

namespace strata::tok::nfc_data {

struct Decomposition {
  uint32_t code_point;
  uint32_t first;
  uint32_t second;   // 0 for a singleton decomposition
  uint8_t composes;  // 1 if first+second recompose to code_point under NFC
};

struct CombiningRange {
  uint32_t first;
  uint32_t last;
  uint8_t combining_class;
};

extern const char* const kUnicodeVersion;
extern const Decomposition kDecompositions[];
extern const std::size_t kDecompositionCount;
extern const CombiningRange kCombiningRanges[];
extern const std::size_t kCombiningRangeCount;

}  // namespace strata::tok::nfc_data
