// Prompt-lookup drafting (runtime/drafter.h): an index from each n-gram of
// the sequence to where it last ended, grown as the sequence grows.
#include <algorithm>
#include <unordered_map>

#include "runtime/drafter.h"
#include "util/error.h"

namespace strata {

namespace {

uint64_t hash_tokens(std::span<const int32_t> t) {
  uint64_t h = 0x84222325CBF29CE4ull ^ t.size();
  for (int32_t x : t) {
    h ^= static_cast<uint32_t>(x);
    h *= 0x100000001B3ull;
    h ^= h >> 29;
  }
  return h;
}

class NgramStream final : public DraftStream {
 public:
  NgramStream(int min_n, int max_n) : min_n_(min_n), max_n_(max_n), last_(static_cast<size_t>(max_n + 1)) {}

  void propose(std::span<const int32_t> tokens, uint64_t, int max, std::vector<int32_t>& out) override {
    if (tokens.size() < indexed_) {  // not the contract's growing sequence: start over
      for (auto& m : last_) m.clear();
      indexed_ = 0;
    }
    // Index every n-gram that has a token after it: those ending before the last token.
    const size_t L = tokens.size();
    for (size_t end = std::max<size_t>(indexed_, 1); end < L; ++end)
      for (int n = min_n_; n <= max_n_ && static_cast<size_t>(n) <= end; ++n)
        last_[static_cast<size_t>(n)][hash_tokens(tokens.subspan(end - static_cast<size_t>(n), static_cast<size_t>(n)))] = end;
    indexed_ = std::max<size_t>(L, 1);
    if (max <= 0) return;
    for (int n = std::min<int>(max_n_, static_cast<int>(L) - 1); n >= min_n_; --n) {
      const auto suffix = tokens.subspan(L - static_cast<size_t>(n));
      const auto& map = last_[static_cast<size_t>(n)];
      const auto it = map.find(hash_tokens(suffix));
      if (it == map.end()) continue;
      const size_t end = it->second;
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + static_cast<long>(end - static_cast<size_t>(n))))
        continue;  // a hash collision
      // What followed, read on into the proposal itself where it reaches
      // the end: a repetition shorter than `max` is continued.
      const size_t first = out.size();
      for (size_t i = end; static_cast<int>(i - end) < max; ++i) out.push_back(i < L ? tokens[i] : out[first + (i - L)]);
      return;
    }
  }

 private:
  int min_n_, max_n_;
  size_t indexed_ = 0;  // n-grams ending before this index are in last_
  std::vector<std::unordered_map<uint64_t, size_t>> last_;  // by n: hash -> where it last ended
};

class NgramDrafter final : public Drafter {
 public:
  NgramDrafter(int min_n, int max_n) : min_n_(min_n), max_n_(max_n) {}
  std::string name() const override { return "ngram"; }
  std::unique_ptr<DraftStream> start(const SamplingParams&) override {
    return std::make_unique<NgramStream>(min_n_, max_n_);
  }

 private:
  int min_n_, max_n_;
};

}  // namespace

std::unique_ptr<Drafter> make_ngram_drafter(int min_n, int max_n) {
  if (min_n < 1 || max_n < min_n) throw Error("ngram drafter: need 1 <= min_n <= max_n");
  return std::make_unique<NgramDrafter>(min_n, max_n);
}

}  // namespace strata
