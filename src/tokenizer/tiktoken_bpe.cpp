#include "tokenizer/tiktoken_bpe.h"

#include <cstdio>

#include "tokenizer/bpe_merge.h"
#include "util/error.h"

namespace strata::tok {

TiktokenModel::TiktokenModel(StringMap<int32_t> ranks) : ranks_(std::move(ranks)) {}

void TiktokenModel::encode_word(std::string_view piece, std::vector<int32_t>& out) const {
  if (auto it = ranks_.find(piece); it != ranks_.end()) {
    out.push_back(it->second);
    return;
  }
  if (cache_.lookup(piece, out)) return;
  std::vector<MergeSymbol> syms(piece.size());
  for (std::size_t i = 0; i < piece.size(); ++i) {
    auto it = ranks_.find(piece.substr(i, 1));
    if (it == ranks_.end()) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(piece[i]));
      throw Error(std::string("tiktoken vocabulary has no token for byte ") + hex);
    }
    const auto n = static_cast<int32_t>(i);
    syms[i] = {it->second, static_cast<uint32_t>(i), static_cast<uint32_t>(i + 1), n - 1,
               i + 1 < piece.size() ? n + 1 : -1};
  }
  merge_symbols(syms, [&](const MergeSymbol& l, const MergeSymbol& r) -> MergeResult {
    auto it = ranks_.find(piece.substr(l.begin, r.end - l.begin));
    if (it == ranks_.end()) return std::nullopt;
    return std::make_pair(static_cast<uint32_t>(it->second), it->second);
  });
  const std::size_t first = out.size();
  for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
  cache_.store(piece, out.data() + first, out.size() - first);
}

}  // namespace strata::tok
