#include "model/kv_cache.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace strata {

namespace {

int64_t ring_size(int64_t window, int64_t max_batch, int64_t max_positions) {
  return window > 0 ? std::min(window + max_batch, max_positions) : 0;
}

}  // namespace

KvCache::KvCache(int64_t layers, int64_t key_width, int64_t value_width, int64_t max_positions,
                 std::vector<int64_t> windows, int64_t max_batch)
    : key_width_(key_width),
      value_width_(value_width),
      max_positions_(max_positions),
      ring_(layers, 0),
      keys_(layers),
      values_(layers) {
  for (int64_t l = 0; l < layers && l < static_cast<int64_t>(windows.size()); ++l) {
    ring_[l] = ring_size(windows[l], max_batch, max_positions);
    if (ring_[l] == max_positions) ring_[l] = 0;  // the window covers the context: no ring needed
  }
  for (int64_t l = 0; l < layers; ++l)
    if (ring_[l]) {
      keys_[l].resize(static_cast<size_t>(ring_[l] * key_width_));
      values_[l].resize(static_cast<size_t>(ring_[l] * value_width_));
    }
}

void KvCache::ensure(int64_t n) {
  if (n > max_positions_)
    throw Error("the sequence needs " + std::to_string(n) + " positions but the context is " +
                std::to_string(max_positions_) + " (raise --ctx)");
  if (n <= capacity_) return;
  int64_t cap = capacity_ ? capacity_ : 64;
  while (cap < n) cap *= 2;
  cap = std::min(cap, max_positions_);
  for (size_t l = 0; l < keys_.size(); ++l) {
    if (ring_[l]) continue;
    keys_[l].resize(static_cast<size_t>(cap * key_width_));
    values_[l].resize(static_cast<size_t>(cap * value_width_));
  }
  capacity_ = cap;
}

uint64_t KvCache::bytes() const {
  uint64_t b = 0;
  for (size_t l = 0; l < keys_.size(); ++l) b += (keys_[l].size() + values_[l].size()) * sizeof(float);
  return b;
}

uint64_t KvCache::bytes_at(int64_t layers, int64_t key_width, int64_t value_width, int64_t max_positions,
                           const std::vector<int64_t>& windows, int64_t max_batch) {
  uint64_t rows = 0;
  for (int64_t l = 0; l < layers; ++l) {
    const int64_t w = l < static_cast<int64_t>(windows.size()) ? windows[l] : 0;
    const int64_t r = ring_size(w, max_batch, max_positions);
    rows += static_cast<uint64_t>(r ? r : max_positions);
  }
  return rows * static_cast<uint64_t>(key_width + value_width) * sizeof(float);
}

}  // namespace strata
