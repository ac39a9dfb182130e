#pragma once
// Per-sequence attention cache: for each layer and position, a key row and a
// value row of fixed widths. MLA stores its compressed latent (normalised
// kv_lora + rotated k_rope) as the key row and no value row.
//
// A sliding-window layer keeps a ring: its window plus one batch of rows
// (a batch writes all its rows before any of them attends, so the oldest row
// of the batch still needs positions a window back from it). Other layers
// grow by doubling up to `max_positions` (the context, --ctx).
#include <cstdint>
#include <iosfwd>
#include <vector>

namespace strata {

class KvCache {
 public:
  // windows: per layer, 0 = keeps every position, else the number of most
  // recent positions that layer's attention reads (empty = all 0).
  KvCache(int64_t layers, int64_t key_width, int64_t value_width, int64_t max_positions,
          std::vector<int64_t> windows = {}, int64_t max_batch = 4096);

  // Makes room for positions [0, n); throws strata::Error past max_positions.
  void ensure(int64_t n);

  float* key(int64_t layer, int64_t pos) { return keys_[layer].data() + slot(layer, pos) * key_width_; }
  float* value(int64_t layer, int64_t pos) { return values_[layer].data() + slot(layer, pos) * value_width_; }
  const float* key(int64_t layer, int64_t pos) const { return keys_[layer].data() + slot(layer, pos) * key_width_; }
  const float* value(int64_t layer, int64_t pos) const {
    return values_[layer].data() + slot(layer, pos) * value_width_;
  }

  // Number of positions whose rows are valid; the next token goes here.
  int64_t length() const { return length_; }
  void set_length(int64_t n) { length_ = n; }
  int64_t max_positions() const { return max_positions_; }
  // Whether positions [0, n) are still all available after length() went
  // past n (a ring may have dropped what the next position would attend to).
  bool can_rewind_to(int64_t n) const;
  // The cache as bytes (for a session file) and back; load() throws
  // strata::Error when the shape differs from this cache's.
  void save(std::ostream& out) const;
  void load(std::istream& in);
  // Bytes the cache holds now.
  uint64_t bytes() const;
  // Bytes it would hold at max_positions (for the RAM budget).
  static uint64_t bytes_at(int64_t layers, int64_t key_width, int64_t value_width, int64_t max_positions,
                           const std::vector<int64_t>& windows, int64_t max_batch);

 private:
  int64_t slot(int64_t layer, int64_t pos) const { return ring_[layer] ? pos % ring_[layer] : pos; }

  int64_t key_width_, value_width_;
  int64_t max_positions_;
  std::vector<int64_t> ring_;    // per layer: ring size, 0 = grows
  std::vector<int64_t> window_;  // per layer: sliding window, 0 = none
  int64_t capacity_ = 0;       // of the growing layers
  int64_t length_ = 0;
  std::vector<std::vector<float>> keys_, values_;
};

}  // namespace strata
