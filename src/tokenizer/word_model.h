#pragma once
// The model stage: one pre-tokenized piece (raw UTF-8 bytes) -> token ids.
// Two implementations: HF "BPE" over a byte-level vocabulary with a merge
// list (bpe.h), and tiktoken's rank-ordered byte-pair merging (tiktoken_bpe.h).
#include <cstdint>
#include <string_view>
#include <vector>

namespace strata::tok {

class WordModel {
 public:
  virtual ~WordModel() = default;
  // Appends the ids of `piece` (non-empty) to `out`. Thread-safe.
  virtual void encode_word(std::string_view piece, std::vector<int32_t>& out) const = 0;
};

}  // namespace strata::tok
