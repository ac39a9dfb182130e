#pragma once
// Per-sequence attention cache: for each layer and position, a key row and a
// value row of fixed widths. MLA stores its compressed latent (normalised
// kv_lora + rotated k_rope) as the key row and no value row.
#include <cstdint>
#include <vector>

namespace strata {

class KvCache {
 public:
  KvCache(int64_t layers, int64_t key_width, int64_t value_width)
      : key_width_(key_width), value_width_(value_width), keys_(layers), values_(layers) {}

  // Makes room for positions [0, n).
  void ensure(int64_t n) {
    if (n <= capacity_) return;
    int64_t cap = capacity_ ? capacity_ : 64;
    while (cap < n) cap *= 2;
    for (auto& k : keys_) k.resize(static_cast<size_t>(cap * key_width_));
    for (auto& v : values_) v.resize(static_cast<size_t>(cap * value_width_));
    capacity_ = cap;
  }

  float* key(int64_t layer, int64_t pos) { return keys_[layer].data() + pos * key_width_; }
  float* value(int64_t layer, int64_t pos) { return values_[layer].data() + pos * value_width_; }
  const float* key(int64_t layer, int64_t pos) const { return keys_[layer].data() + pos * key_width_; }
  const float* value(int64_t layer, int64_t pos) const { return values_[layer].data() + pos * value_width_; }

  // Number of positions whose rows are valid; the next token goes here.
  int64_t length() const { return length_; }
  void set_length(int64_t n) { length_ = n; }

 private:
  int64_t key_width_, value_width_;
  int64_t capacity_ = 0;
  int64_t length_ = 0;
  std::vector<std::vector<float>> keys_, values_;
};

}  // namespace strata
