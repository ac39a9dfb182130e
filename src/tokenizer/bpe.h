#pragma once
// HF tokenizers' "BPE" model over a GPT-2 byte-level vocabulary: each byte of
// a piece starts as the token of its byte-level character, then merges apply
// in merge-list order (rank = position in the list).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/word_cache.h"
#include "tokenizer/word_model.h"

namespace strata::tok {

class BpeModel : public WordModel {
 public:
  // vocab: byte-level token text -> id. merges: (left, right) token texts in
  // rank order. unk: HF's unk_token id, used for bytes missing from the vocab
  // (without one such bytes are dropped, as HF does). ignore_merges: a piece
  // that is itself in the vocab becomes that token directly. `origin` names
  // the file for errors (a merge whose parts or result are not in the vocab).
  BpeModel(StringMap<int32_t> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           std::optional<int32_t> unk, bool ignore_merges, const std::string& origin);

  void encode_word(std::string_view piece, std::vector<int32_t>& out) const override;

 private:
  StringMap<int32_t> vocab_;
  std::array<int32_t, 256> byte_ids_{};  // -1: byte not in vocab
  std::unordered_map<uint64_t, std::pair<uint32_t, int32_t>> merges_;  // (left << 32 | right) -> (rank, id)
  std::optional<int32_t> unk_;
  bool ignore_merges_;
  WordCache cache_;
};

}  // namespace strata::tok
