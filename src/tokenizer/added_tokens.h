#pragma once
// Added / special tokens ("<|im_start|>", "<｜User｜>", ...): literal strings
// cut out of the text before pre-tokenization and mapped straight to their
// ids, as HF tokenizers' AddedVocabulary does (leftmost-longest matching,
// with the lstrip / rstrip / single_word options).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::tok {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;       // the match swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // only matches when not inside a word
  bool normalized = false;   // matched on normalized text (else on raw text)
};

class AddedTokenMatcher {
 public:
  void add(const AddedToken& token);
  bool empty() const { return tokens_.empty(); }

  struct Segment {
    std::size_t begin, end;
    int32_t id;  // -1: ordinary text between tokens
  };
  // Covers `text` (valid UTF-8) with alternating text and token segments,
  // in order; ordinary segments are never empty.
  std::vector<Segment> split(std::string_view text) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int32_t token = -1;                                       // index into tokens_
  };
  int32_t child(int32_t node, unsigned char b) const;
  // Longest token starting at `pos`, or -1.
  int32_t longest_at(std::string_view text, std::size_t pos, std::size_t& len) const;

  std::vector<Node> nodes_{Node{}};
  std::vector<AddedToken> tokens_;
  bool first_byte_[256] = {};
};

}  // namespace strata::tok
