#include "tokenizer/nfc.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "tokenizer/nfc_tables.h"
#include "tokenizer/utf8.h"

namespace strata::tok {

namespace {

using nfc_data::kCombiningRangeCount;
using nfc_data::kCombiningRanges;
using nfc_data::kDecompositionCount;
using nfc_data::kDecompositions;

// Hangul syllables decompose and compose by arithmetic (Unicode ch. 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

struct Index {
  std::unordered_map<char32_t, const nfc_data::Decomposition*> decomposition;
  std::unordered_map<uint64_t, char32_t> composition;  // (first << 32 | second) -> composite
  Index() {
    decomposition.reserve(kDecompositionCount);
    for (std::size_t i = 0; i < kDecompositionCount; ++i) {
      const auto& d = kDecompositions[i];
      decomposition.emplace(d.code_point, &d);
      if (d.composes) composition.emplace((uint64_t{d.first} << 32) | d.second, d.code_point);
    }
  }
};

const Index& index() {
  static const Index idx;
  return idx;
}

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto* end = kCombiningRanges + kCombiningRangeCount;
  const auto* it = std::upper_bound(kCombiningRanges, end, cp,
                                    [](char32_t c, const nfc_data::CombiningRange& r) { return c < r.first; });
  if (it == kCombiningRanges) return 0;
  --it;
  return cp <= it->last ? it->combining_class : 0;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto& map = index().decomposition;
  auto it = map.find(cp);
  if (it == map.end()) {
    out.push_back(cp);
    return;
  }
  decompose(it->second->first, out);
  if (it->second->second) decompose(it->second->second, out);
}

char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto& map = index().composition;
  auto it = map.find((uint64_t{a} << 32) | b);
  return it == map.end() ? 0 : it->second;
}

}  // namespace

std::string nfc_normalize(std::string_view text) {
  // U+0300 is the first code point NFC can touch; its UTF-8 lead byte is 0xCC.
  if (std::none_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) >= 0xCC; }))
    return std::string(text);

  // 1. Full canonical decomposition.
  // One slot per code point (decompositions add a few): reserving one per
  // byte would take four bytes for each byte of the text.
  std::vector<char32_t> cps;
  cps.reserve(static_cast<std::size_t>(std::count_if(
                  text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; })) +
              16);
  for (std::size_t i = 0; i < text.size();) decompose(next_code_point(text, i), cps);

  // 2. Canonical ordering: stable sort each run of non-starters by class.
  std::vector<uint8_t> ccc(cps.size());
  for (std::size_t i = 0; i < cps.size(); ++i) ccc[i] = combining_class(cps[i]);
  for (std::size_t i = 0; i < cps.size();) {
    if (ccc[i] == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < cps.size() && ccc[j] != 0) ++j;
    for (std::size_t a = i + 1; a < j; ++a)  // insertion sort: runs are short and must stay stable
      for (std::size_t b = a; b > i && ccc[b - 1] > ccc[b]; --b) {
        std::swap(cps[b - 1], cps[b]);
        std::swap(ccc[b - 1], ccc[b]);
      }
    i = j;
  }

  // 3. Canonical composition: a character joins the last starter unless it is
  // blocked, i.e. a character in between has the same or a higher class.
  // last_class is the class of the last character kept; 256 marks a leading
  // non-starter, which has no starter to join.
  std::vector<char32_t> out;
  out.reserve(cps.size());
  std::size_t starter = 0;
  int last_class = 256;
  for (std::size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const int cc = ccc[i];
    if (!out.empty() && (last_class < cc || last_class == 0)) {
      if (const char32_t composite = compose_pair(out[starter], c)) {
        out[starter] = composite;
        continue;
      }
    }
    if (cc == 0) starter = out.size();
    last_class = (out.empty() && cc != 0) ? 256 : cc;
    out.push_back(c);
  }

  std::string result;
  result.reserve(text.size());
  for (char32_t c : out) append_utf8(result, c);
  return result;
}

}  // namespace strata::tok
