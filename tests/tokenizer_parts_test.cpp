// The tokenizer's building blocks in isolation: UTF-8 validation, the GPT-2
// byte alphabet, NFC, regex translation for PCRE2, split behaviors and
// added-token matching. Expected values are from the Unicode standard (UAX
// #15 examples), HF tokenizers' documentation, or worked by hand.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/nfc.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer_state.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace strata::tok {
namespace {

std::string error_of(const std::string& text) {
  try {
    validate_utf8(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TokenizerUtf8, AcceptsWellFormedText) {
  EXPECT_NO_THROW(validate_utf8(""));
  EXPECT_NO_THROW(validate_utf8("plain ascii \t\n"));
  EXPECT_NO_THROW(validate_utf8("é 中文 😀 \xF4\x8F\xBF\xBF"));  // U+10FFFF is the last valid code point
  EXPECT_NO_THROW(validate_utf8(std::string("nul\0inside", 10)));
}

TEST(TokenizerUtf8, RejectsEachKindOfMalformedSequenceWithItsOffset) {
  struct Case {
    std::string text, phrase;
  };
  const std::vector<Case> cases = {
      {"\x80", "byte offset 0: unexpected continuation byte 0x80"},
      {"ab\xC3", "byte offset 2: truncated 2-byte sequence at end of text"},
      {"ab\xE4\xB8", "byte offset 2: truncated 3-byte sequence at end of text"},
      {"x\xE4" "A", "byte offset 1: truncated 3-byte sequence (byte 0x41 at offset 2"},
      {"\xC0\xAF", "byte offset 0: overlong encoding"},
      {"12\xE0\x80\xAF", "byte offset 2: overlong encoding"},
      {"\xED\xA0\x80", "byte offset 0: encoded surrogate code point"},
      {"\xF4\x90\x80\x80", "code point above U+10FFFF"},
      {"ok \xFF", "byte offset 3: byte 0xFF never appears in UTF-8"},
  };
  for (const auto& c : cases) {
    const std::string msg = error_of(c.text);
    EXPECT_NE(msg.find(c.phrase), std::string::npos) << "got: " << msg;
    EXPECT_EQ(msg.rfind("invalid UTF-8 in input text at byte offset", 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "must be one line: " << msg;
  }
}

TEST(TokenizerByteLevel, Gpt2AlphabetIsABijection) {
  EXPECT_EQ(byte_to_unicode(' '), U'\u0120');   // "Ġ"
  EXPECT_EQ(byte_to_unicode('\n'), U'\u010A');  // "Ċ"
  EXPECT_EQ(byte_to_unicode('A'), U'A');
  EXPECT_EQ(byte_to_unicode(0xAD), U'\u0143');  // the soft hyphen is the last remapped byte
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string text = to_byte_level(all);
  EXPECT_NO_THROW(validate_utf8(text));
  EXPECT_EQ(from_byte_level(text), all);
  EXPECT_EQ(from_byte_level("Ġhello"), " hello");
  EXPECT_FALSE(from_byte_level("<｜begin▁of▁sentence｜>").has_value());
}

TEST(TokenizerNfc, ComposesReordersAndKeepsExclusions) {
  EXPECT_EQ(nfc_normalize("cafe\u0301"), "caf\u00e9");
  EXPECT_EQ(nfc_normalize("A\u030a \u212b"), "\u00c5 \u00c5");            // singleton: Angstrom sign
  EXPECT_EQ(nfc_normalize("\u1100\u1161\u11a8"), "\uac01");               // Hangul L V T
  EXPECT_EQ(nfc_normalize("\uac00\u11a8"), "\uac01");                     // Hangul LV + T
  EXPECT_EQ(nfc_normalize("a\u0307\u0323"), "\u1ea1\u0307");              // reordered, then composed
  EXPECT_EQ(nfc_normalize("\u1e9b\u0323"), "\u1e9b\u0323");               // UAX #15 example
  EXPECT_EQ(nfc_normalize("\u0344"), "\u0308\u0301");                     // non-starter decomposition
  EXPECT_EQ(nfc_normalize("\u0958"), "\u0915\u093c");                     // composition exclusion
  EXPECT_EQ(nfc_normalize("\uf900"), "\u8c48");                           // CJK compatibility ideograph
  EXPECT_EQ(nfc_normalize("\u0301e"), "\u0301e");                         // leading mark stays alone
  EXPECT_EQ(nfc_normalize("o\u0308\u0304"), "\u022b");                    // two-step composition
  EXPECT_EQ(nfc_normalize("plain ascii"), "plain ascii");
  EXPECT_EQ(nfc_normalize("中文 😀 \u00e9"), "中文 😀 \u00e9");
}

TEST(TokenizerRegex, TranslatesWhitespaceAndClassIntersection) {
  EXPECT_EQ(translate_pattern(R"([\p{L}&&[^\p{Han}]]+)"), R"((?:(?=[^\p{Han}])[\p{L}])+)");
  EXPECT_EQ(translate_pattern(R"([a-z&&[^aeiou]&&\p{Ll}])"), R"((?:(?=[^aeiou])(?=[\p{Ll}])[a-z]))");
  const std::string ws = translate_pattern(R"(\s)");
  EXPECT_EQ(ws.front(), '[');
  EXPECT_EQ(ws.find("180E"), std::string::npos) << "U+180E is not White_Space: " << ws;
  EXPECT_EQ(translate_pattern(R"(\S)").rfind("[^", 0), 0u);
  EXPECT_EQ(translate_pattern(R"([^\s\p{L}])").rfind("[^\\x{9}-\\x{D}", 0), 0u);
  EXPECT_EQ(translate_pattern(R"(\u4e00)"), R"(\x{4e00})");
  EXPECT_THROW(translate_pattern(R"([\S])"), Error);
  EXPECT_THROW(translate_pattern(R"([^a&&b])"), Error);
}

std::vector<std::string> matches(const Regex& re, const std::string& text) {
  std::vector<std::pair<std::size_t, std::size_t>> m;
  re.find_all(text, m);
  std::vector<std::string> out;
  for (auto [b, e] : m) out.push_back(text.substr(b, e - b));
  return out;
}

TEST(TokenizerRegex, KimiPatternSeparatesHanAndFollowsLookahead) {
  const Regex kimi(kimi_pattern(), "kimi");
  EXPECT_EQ(matches(kimi, "Hello世界 it's  1234"),
            (std::vector<std::string>{"Hello", "世界", " it's", " ", " ", "123", "4"}));
  // \s+(?!\S) leaves the last space to join the next word.
  const Regex gpt2(kGpt2Pattern, "gpt2");
  EXPECT_EQ(matches(gpt2, "a   b\n"), (std::vector<std::string>{"a", "  ", " b", "\n"}));
  // U+180E is not whitespace for Oniguruma or Rust; PCRE2's own \s would say it is.
  EXPECT_EQ(matches(gpt2, "x\u180e y"), (std::vector<std::string>{"x", "\u180e", " y"}));
}

TEST(TokenizerRegex, BadPatternNamesItsOrigin) {
  try {
    Regex bad("(unclosed", "tokenizer.json pre_tokenizer[0]");
    FAIL() << "compiled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json pre_tokenizer[0]: regex does not compile"), std::string::npos)
        << e.what();
  }
}

std::vector<std::string> split_with(SplitBehavior b, bool invert = false) {
  // HF tokenizers' documented example: "the-final--countdown" split on "-".
  const std::string text = "the-final--countdown";
  std::vector<std::pair<std::size_t, std::size_t>> m = {{3, 4}, {9, 10}, {10, 11}};
  std::vector<std::string> out;
  for (auto [s, e] : split_spans(text.size(), m, b, invert)) out.push_back(text.substr(s, e - s));
  return out;
}

TEST(TokenizerSplit, BehaviorsMatchHfDocumentation) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split_with(SplitBehavior::Removed), (V{"the", "final", "countdown"}));
  EXPECT_EQ(split_with(SplitBehavior::Isolated), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split_with(SplitBehavior::MergedWithPrevious), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split_with(SplitBehavior::MergedWithNext), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split_with(SplitBehavior::Contiguous), (V{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(split_with(SplitBehavior::Removed, /*invert=*/true), (V{"-", "-", "-"}));
  EXPECT_THROW(parse_split_behavior("Sideways", "x"), Error);
}

TEST(TokenizerSplit, ByteLevelPrefixSpaceAndGpt2Split) {
  PreTokenizer p;
  p.add_byte_level(/*add_prefix_space=*/true, /*use_regex=*/true);
  std::vector<std::string> pieces;
  p.split("Hello world's", pieces);
  EXPECT_EQ(pieces, (std::vector<std::string>{" Hello", " world", "'s"}));
}

// split_each hands pieces on a batch of matches at a time (so that a long
// text never needs all of them at once); the last piece of a batch can still
// grow by what follows. Whatever the batch, the pieces are split()'s for the
// whole text in one batch, for every behavior, inverted or not, with runs of
// delimiters, empty matches and a ByteLevel step after the split.
TEST(TokenizerSplit, BatchedSplitGivesThePiecesOfOneBatch) {
  const std::vector<std::string> texts = {
      "the-final--countdown", "--a---b-c--", "-", "abc", "x-y-z-", "a--b--c--d--e---f----g",
      "lead-ing and-trailing- spaces -", "é-中--文-😀",
  };
  const std::vector<std::string> patterns = {"-", "-*", "-+", "(?=-)"};  // "-*" and "(?=-)" match empty too
  for (const auto& pattern : patterns)
    for (auto b : {SplitBehavior::Removed, SplitBehavior::Isolated, SplitBehavior::MergedWithPrevious,
                   SplitBehavior::MergedWithNext, SplitBehavior::Contiguous})
      for (bool invert : {false, true})
        for (bool byte_level : {false, true}) {
          PreTokenizer p;
          p.add_split(std::make_shared<const Regex>(pattern, "test"), b, invert);
          if (byte_level) p.add_byte_level(/*add_prefix_space=*/true, /*use_regex=*/true);
          for (const auto& text : texts) {
            std::vector<std::string> whole;
            p.split_each(text, [&](std::string_view piece) {
              whole.emplace_back(piece);
              return true;
            }, /*batch=*/1 << 20);
            for (std::size_t batch : {1, 2, 3, 5}) {
              std::vector<std::string> batched;
              p.split_each(text, [&](std::string_view piece) {
                batched.emplace_back(piece);
                return true;
              }, batch);
              EXPECT_EQ(batched, whole) << "pattern " << pattern << ", behavior " << static_cast<int>(b)
                                        << ", invert " << invert << ", byte level " << byte_level << ", batch "
                                        << batch << ", text " << text;
            }
          }
        }
}

TEST(TokenizerSplit, SplitEachStopsWhenTold) {
  PreTokenizer p;
  p.add_byte_level(/*add_prefix_space=*/false, /*use_regex=*/true);
  std::vector<std::string> seen;
  EXPECT_FALSE(p.split_each("one two three four", [&](std::string_view piece) {
    seen.emplace_back(piece);
    return seen.size() < 2;
  }, /*batch=*/1));
  EXPECT_EQ(seen, (std::vector<std::string>{"one", " two"}));
}

TEST(TokenizerAddedTokens, LeftmostLongestWithStripOptions) {
  AddedTokenMatcher m;
  m.add({"<a>", 1});
  m.add({"<a><b>", 2});
  AddedToken strip{"<s>", 3};
  strip.lstrip = strip.rstrip = true;
  m.add(strip);
  AddedToken word{"cat", 4};
  word.single_word = true;
  m.add(word);

  auto show = [&](const std::string& text) {
    std::string out;
    for (const auto& s : m.split(text))
      out += s.id >= 0 ? "[" + std::to_string(s.id) + ":" + text.substr(s.begin, s.end - s.begin) + "]"
                       : text.substr(s.begin, s.end - s.begin);
    return out;
  };
  EXPECT_EQ(show("x<a><b>y<a>"), "x[2:<a><b>]y[1:<a>]");
  EXPECT_EQ(show("x \u3000<s> \ny"), "x[3: \u3000<s> \n]y");
  EXPECT_EQ(show("cat concat cats cat_ cat."), "[4:cat] concat cats [4:cat]_ [4:cat].");  // _ is not alphanumeric
  EXPECT_EQ(show("no tokens"), "no tokens");
  EXPECT_TRUE(m.split("").empty());
}

}  // namespace
}  // namespace strata::tok
