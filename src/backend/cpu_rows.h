#pragma once
// Row-wise ops of the CPU backend over its thread pool: a prompt's rows are
// independent, and at 16 threads an op that one thread runs alone leaves
// fifteen idle. Chunks are whole rows (or blocks of an element-wise op's
// elements), so which thread takes a row never changes its bits; a decode
// step's single row runs on the calling thread, with no hand-off at all.
#include <algorithm>
#include <cstddef>

#include "util/thread_pool.h"

namespace strata::cpu_rows {

// Rows a chunk takes at least: about 32K floats of work, so that a hand-off
// (microseconds) stays small beside it.
inline size_t rows_per_chunk(size_t row_floats) {
  return std::max<size_t>(1, (size_t{1} << 15) / std::max<size_t>(row_floats, 1));
}

// fn(worker, r0, r1) over rows [0, n) of about `row_floats` floats of work
// each; `worker` names the thread (its own planned scratch).
template <class F>
void for_rows(ThreadPool& pool, size_t n, size_t row_floats, const F& fn) {
  pool.parallel_for_indexed(n, [f = &fn](int worker, size_t r0, size_t r1) { (*f)(worker, r0, r1); },
                            rows_per_chunk(row_floats));
}

// fn(i0, i1) over elements [0, n) in blocks of kBlock: an element-wise op.
constexpr size_t kBlock = 1024;
template <class F>
void for_elements(ThreadPool& pool, size_t n, const F& fn) {
  const auto blocks = [&fn, n](int, size_t b0, size_t b1) { fn(b0 * kBlock, std::min(b1 * kBlock, n)); };
  for_rows(pool, (n + kBlock - 1) / kBlock, kBlock, blocks);
}

}  // namespace strata::cpu_rows
