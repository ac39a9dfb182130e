#pragma once
// Generated tokens -> text that is safe to send now: never half a UTF-8
// character, never the first part of what may become a stop string, and cut
// exactly where a stop string begins. The scheduler runs one per sequence
// that asks for text, so a stop string ends generation on the step thread.
// A token the tokenizer does not have (the model's vocabulary may be larger)
// adds no text.
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

class Tokenizer;

class TextStream {
 public:
  TextStream(const Tokenizer& tok, std::vector<std::string> stops);
  // Adds a token and returns the text that became safe to send.
  std::string add(int32_t token);
  // The held-back rest, at the end of generation (cut at a stop string).
  std::string flush();
  // A stop string appeared: the text before it was returned, generation should end.
  bool stopped() const { return stopped_; }

 private:
  std::string take(bool final);
  const Tokenizer& tok_;
  std::vector<std::string> stops_;
  std::string text_;  // the tokens' text so far
  size_t sent_ = 0;   // bytes of it already returned
  bool stopped_ = false;
};

// Length of the longest suffix of `s` (from `from`) that is a proper prefix
// of one of `needles`: the text to hold back while it may still become one.
size_t partial_match_tail(const std::string& s, size_t from, const std::vector<std::string>& needles);

}  // namespace strata
