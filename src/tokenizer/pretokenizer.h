#pragma once
// Pre-tokenization: cutting normalized text into the pieces BPE encodes
// independently, as HF tokenizers' pre_tokenizer (Sequence of Split and
// ByteLevel) or tiktoken's pat_str does. Pieces stay raw UTF-8 bytes; the
// byte-level alphabet is applied by the BPE model, which works on bytes.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/regex.h"

namespace strata::tok {

// What happens to the matched delimiters (HF SplitDelimiterBehavior).
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// Parses "Removed", "Isolated", ... ; throws strata::Error naming `origin`.
SplitBehavior parse_split_behavior(std::string_view name, std::string_view origin);

// GPT-2's pattern, used by the ByteLevel pre-tokenizer when use_regex is set.
extern const char* const kGpt2Pattern;

// Cuts `text` ([0, size)) by `matches` (sorted, non-overlapping) and returns
// the kept spans per `behavior`; `invert` swaps which spans count as matches.
// Empty spans are dropped.
std::vector<std::pair<std::size_t, std::size_t>> split_spans(
    std::size_t size, const std::vector<std::pair<std::size_t, std::size_t>>& matches, SplitBehavior behavior,
    bool invert);

class PreTokenizer {
 public:
  void add_split(std::shared_ptr<const Regex> regex, SplitBehavior behavior, bool invert);
  // ByteLevel: optionally prefix a space to each piece that lacks one, then
  // optionally split with the GPT-2 pattern.
  void add_byte_level(bool add_prefix_space, bool use_regex);

  // Appends the pieces of `text` (valid UTF-8) to `pieces`.
  void split(std::string_view text, std::vector<std::string>& pieces) const;

  // The same pieces, in order, handed to `on_piece` one at a time until it
  // returns false (then false). However long the text, what is held at once
  // is a batch of about `batch` matches and the pieces of one: the first
  // splitting step's regex runs over the whole text (its lookarounds see what
  // split()'s see), and its matches become pieces batch by batch, each batch's
  // last piece waiting for the next (a delimiter after it may join it).
  using PieceFn = std::function<bool(std::string_view)>;
  bool split_each(std::string_view text, const PieceFn& on_piece, std::size_t batch = 4096) const;

 private:
  // The steps from `first` on applied to one piece.
  bool split_rest(std::string_view piece, std::size_t first, const PieceFn& on_piece) const;

  struct Step {
    std::shared_ptr<const Regex> regex;  // null: no regex split in this step
    SplitBehavior behavior = SplitBehavior::Isolated;
    bool invert = false;
    bool add_prefix_space = false;
  };
  std::vector<Step> steps_;
};

}  // namespace strata::tok
