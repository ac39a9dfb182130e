#pragma once
// How the CPU backend's attention walks a step (cpu_attention.cpp), and the
// scratch one pool thread needs for it.
//
// Consecutive rows of one sequence (a prefill chunk, a verified draft)
// attend together, up to kRowsPerBlock at a time: each cached key and value
// row is then read once per block and head rather than once per row, while
// every row still runs exactly the dots, softmax and axpys it would run alone
// (same order, same bits).
#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace strata {

inline constexpr size_t kRowsPerBlock = 32;
// Cached keys scored per call of kernels::dots_rows (a chunk's keys stay in
// L1 while the rows of the block score them, a few rows per load).
inline constexpr int64_t kKeysPerChunk = 16;

// Scratch of one pool thread for blocks of up to `block` rows (the step's
// rows, at most kRowsPerBlock) attending over up to `context` positions
// (latent, latent_rope: MLA's widths, 0 for GQA). The scores' part, block ×
// (context + 1), also stages MLA's per-head products of a block's rows
// before the scores and after the weighted sum (cpu_attention.cpp).
inline size_t cpu_attention_floats(size_t block, size_t context, size_t latent, size_t latent_rope) {
  return block * (context + 1) + block * (2 * latent + latent_rope);
}
inline size_t cpu_attention_pointers(size_t context) { return 2 * context; }
inline size_t cpu_attention_ints(size_t block) { return 2 * block; }

// Walks cached positions [lo, hi) a chunk of kKeysPerChunk at a time. For
// each chunk, of the rows r < rows of a block (row r sees positions
// [first(r), end(r))), visit(list, k, from, count) gets the k rows that see
// the same part of it, their indices in `list` (room for `rows`): those that
// see all of it together (so the kernels share each key's loads), a row that
// sees only part of it alone. A row meets its positions in ascending order,
// once each, so its dots and axpys keep their order.
template <class First, class End, class Visit>
void by_key_chunks(int64_t lo, int64_t hi, size_t rows, First first, End end, size_t* list, Visit visit) {
  for (int64_t s0 = lo; s0 < hi; s0 += kKeysPerChunk) {
    const int64_t s1 = std::min(hi, s0 + kKeysPerChunk);
    size_t k = 0;
    for (size_t r = 0; r < rows; ++r) {
      const int64_t from = std::max(s0, first(r)), upto = std::min(s1, end(r));
      if (upto <= from) continue;
      if (from == s0 && upto == s1) {
        list[k++] = r;
      } else {
        size_t alone = r;
        visit(&alone, size_t{1}, from, static_cast<size_t>(upto - from));
      }
    }
    if (k > 0) visit(static_cast<const size_t*>(list), k, s0, static_cast<size_t>(s1 - s0));
  }
}

}  // namespace strata
