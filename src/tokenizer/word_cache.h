#pragma once
// Memo of piece -> ids. Natural text repeats the same words constantly, and
// a cache hit skips the merge loop entirely. Bounded: cleared when full.
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace strata::tok {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

class WordCache {
 public:
  // Appends the cached ids for `piece` to `out`; false on a miss.
  bool lookup(std::string_view piece, std::vector<int32_t>& out) const {
    std::lock_guard lock(mu_);
    auto it = map_.find(piece);
    if (it == map_.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  void store(std::string_view piece, const int32_t* ids, std::size_t n) const {
    if (piece.size() > kMaxPieceBytes) return;  // rare giants would only evict useful entries
    std::lock_guard lock(mu_);
    if (map_.size() >= kMaxEntries) map_.clear();
    map_.emplace(std::string(piece), std::vector<int32_t>(ids, ids + n));
  }

 private:
  static constexpr std::size_t kMaxEntries = 1 << 16;
  static constexpr std::size_t kMaxPieceBytes = 256;
  mutable std::mutex mu_;
  mutable StringMap<std::vector<int32_t>> map_;
};

}  // namespace strata::tok
