#pragma once
// How fast this machine's kernels multiply by weights that stream from
// memory, as a model's do: `strata budget` turns it into compute seconds a
// token, `strata tune` into a thread count.
//
// The weights: copies of one matrix of rows `in` wide in Q8_0 or MXFP4, every
// row the same random one (the kernels' speed does not depend on the values),
// laid out as the CPU path keeps them (interleaved where the kernels read 16
// rows), together large_matrix_mib() MiB: four times the last-level cache
// (256 MiB to 2 GiB, an eighth of the memory available at most;
// STRATA_BUDGET_COMPUTE_MIB sets another size, for tests under sanitizers). A product goes to the next copy each time, so it reads
// its weights from memory, not from a cache that held them last time: one
// copy for the rate of a large product, many small ones for what each of a
// decode token's many products costs beyond its bytes.
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/linear.h"

namespace strata {

class ThreadPool;

// The last-level cache's bytes (the largest the CPU reports), 0 unknown.
uint64_t last_level_cache_bytes();
// MiB of weights far more than that cache holds: 4x it, 256 to 2048, and at
// most an eighth of the memory available (64 at least).
uint64_t large_matrix_mib();
// The MiB the timers' weights take: STRATA_BUDGET_COMPUTE_MIB (1 to 4096)
// where set, else large_matrix_mib().
uint64_t compute_mib();

// Seconds one call of `run` takes: one call to warm up (threads, scratch,
// caches), then calls for about `seconds` (3 at least), their median (the
// upper middle one of an even count).
double median_run_seconds(const std::function<void()>& run, double seconds);

// An `out` x `in` matrix in Q8_0 or MXFP4 at `data` (its row_bytes() · out
// bytes), every row the same random one (the kernels' speed does not depend
// on the values), laid out as the CPU path keeps it (interleaved where the
// kernels read 16 rows).
kernels::WeightMatrix timing_matrix(bool mxfp4, int64_t out, int64_t in, uint8_t* data);

class ProductTimer {
 public:
  // matrix_bytes 0: one matrix of all the bytes; else copies of a matrix of
  // about that many bytes (16 rows at least). `in`: the rows' width (a
  // multiple of 32), which with the bytes sets how many rows the threads
  // share: a small matrix of a model is as wide as its hidden size.
  explicit ProductTimer(bool mxfp4, uint64_t matrix_bytes = 0, int64_t in = 8192);
  ProductTimer(const ProductTimer&) = delete;
  ProductTimer& operator=(const ProductTimer&) = delete;

  uint64_t matrix_bytes() const { return matrix_bytes_; }
  // Seconds per product of `rows` rows: the median of products made for
  // about `seconds` (3 at least), after one to warm up.
  double seconds(size_t rows, ThreadPool& pool, double seconds) const;

 private:
  std::vector<uint8_t> data_;
  std::vector<kernels::WeightMatrix> copies_;
  uint64_t matrix_bytes_ = 0;
};

}  // namespace strata
