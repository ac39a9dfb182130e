#pragma once
// tiktoken's byte-pair encoding: ranks are given for byte strings (rank = id);
// a piece that is itself a token encodes to it directly, otherwise adjacent
// parts merge lowest-rank-first where their concatenation has a rank.
#include <cstdint>
#include <string>

#include "tokenizer/word_cache.h"
#include "tokenizer/word_model.h"

namespace strata::tok {

class TiktokenModel : public WordModel {
 public:
  explicit TiktokenModel(StringMap<int32_t> ranks);
  void encode_word(std::string_view piece, std::vector<int32_t>& out) const override;

 private:
  StringMap<int32_t> ranks_;
  WordCache cache_;
};

}  // namespace strata::tok
