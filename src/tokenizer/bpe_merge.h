#pragma once
// The byte-pair merge loop shared by both BPE flavours: repeatedly merge the
// adjacent pair with the lowest rank, leftmost first on ties, until no
// adjacent pair has a rank. A heap of candidates with lazy invalidation keeps
// it O(n log n) in the piece length (long runs of one character are common in
// code and whitespace).
#include <cstdint>
#include <optional>
#include <queue>
#include <utility>
#include <vector>

namespace strata::tok {

struct MergeSymbol {
  int32_t id;
  uint32_t begin, end;  // byte span of the piece this symbol covers
  int32_t prev, next;   // neighbours in the current segmentation, -1 at the ends
};

// Rank and resulting id of merging two adjacent symbols, if they merge.
using MergeResult = std::optional<std::pair<uint32_t, int32_t>>;

// `pair(left, right)` returns the merge of two adjacent symbols. On return,
// the surviving symbols are those reachable from index 0 through `next`.
template <class PairFn>
void merge_symbols(std::vector<MergeSymbol>& syms, PairFn&& pair) {
  struct Candidate {
    uint32_t rank;
    uint32_t pos;  // index of the left symbol
    int32_t new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t left) {
    if (left < 0 || syms[left].next < 0) return;
    if (MergeResult m = pair(syms[left], syms[syms[left].next]))
      heap.push({m->first, static_cast<uint32_t>(left), m->second});
  };
  for (std::size_t i = 0; i + 1 < syms.size(); ++i) push(static_cast<int32_t>(i));

  std::vector<bool> dead(syms.size(), false);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    MergeSymbol& left = syms[c.pos];
    if (dead[c.pos] || left.next < 0) continue;
    // Stale entry: the symbols at this position changed since it was pushed.
    // As in HF tokenizers, it stays valid if the current pair merges to the same id.
    const MergeResult now = pair(left, syms[left.next]);
    if (!now || now->second != c.new_id) continue;
    const int32_t right = left.next;
    left.id = c.new_id;
    left.end = syms[right].end;
    left.next = syms[right].next;
    if (left.next >= 0) syms[left.next].prev = static_cast<int32_t>(c.pos);
    dead[right] = true;
    push(left.prev);
    push(static_cast<int32_t>(c.pos));
  }
}

}  // namespace strata::tok
