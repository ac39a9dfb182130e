#include "tokenizer/bpe.h"

#include "tokenizer/bpe_merge.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace strata::tok {

namespace {

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t{static_cast<uint32_t>(a)} << 32) | static_cast<uint32_t>(b); }

}  // namespace

BpeModel::BpeModel(StringMap<int32_t> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                   std::optional<int32_t> unk, bool ignore_merges, const std::string& origin)
    : vocab_(std::move(vocab)), unk_(unk), ignore_merges_(ignore_merges) {
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    append_utf8(ch, byte_to_unicode(static_cast<unsigned char>(b)));
    auto it = vocab_.find(ch);
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
  auto id_of = [&](const std::string& token, std::size_t rank) {
    auto it = vocab_.find(token);
    if (it == vocab_.end())
      throw Error(origin + ": merge #" + std::to_string(rank) + " uses \"" + token + "\", which is not in the vocab");
    return it->second;
  };
  merges_.reserve(merges.size());
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const int32_t left = id_of(a, rank), right = id_of(b, rank), merged = id_of(a + b, rank);
    // First occurrence wins, as in HF when a merge is listed twice.
    merges_.emplace(pair_key(left, right), std::make_pair(static_cast<uint32_t>(rank), merged));
  }
}

void BpeModel::encode_word(std::string_view piece, std::vector<int32_t>& out) const {
  if (cache_.lookup(piece, out)) return;
  const std::size_t first = out.size();
  if (ignore_merges_) {
    if (auto it = vocab_.find(to_byte_level(piece)); it != vocab_.end()) {
      out.push_back(it->second);
      cache_.store(piece, &out[first], 1);
      return;
    }
  }
  std::vector<MergeSymbol> syms;
  syms.reserve(piece.size());
  for (std::size_t i = 0; i < piece.size(); ++i) {
    int32_t id = byte_ids_[static_cast<unsigned char>(piece[i])];
    if (id < 0) {
      if (!unk_) continue;
      id = *unk_;
    }
    const auto n = static_cast<int32_t>(syms.size());
    syms.push_back({id, static_cast<uint32_t>(i), static_cast<uint32_t>(i + 1), n - 1, -1});
    if (n > 0) syms[n - 1].next = n;
  }
  if (syms.empty()) return;
  merge_symbols(syms, [this](const MergeSymbol& l, const MergeSymbol& r) -> MergeResult {
    auto it = merges_.find(pair_key(l.id, r.id));
    if (it == merges_.end()) return std::nullopt;
    return it->second;
  });
  for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
  cache_.store(piece, out.data() + first, out.size() - first);
}

}  // namespace strata::tok
