#pragma once
// The CPU backend's KV cache (backend/kv_cache.h): per layer, rows of f32 in
// host memory; the CPU attention ops address them by pointer.
#include <cstdint>
#include <iosfwd>
#include <vector>

#include "backend/kv_cache.h"

namespace strata {

class HostKvCache final : public KvCache {
 public:
  explicit HostKvCache(const CacheShape& shape);

  void ensure(int64_t n) override;

  float* key(int64_t layer, int64_t pos) { return keys_[layer].data() + slot(layer, pos) * key_width_; }
  float* value(int64_t layer, int64_t pos) { return values_[layer].data() + slot(layer, pos) * value_width_; }
  const float* key(int64_t layer, int64_t pos) const { return keys_[layer].data() + slot(layer, pos) * key_width_; }
  const float* value(int64_t layer, int64_t pos) const {
    return values_[layer].data() + slot(layer, pos) * value_width_;
  }

  // Layer `layer`'s recurrent state (CacheShape::state_floats values).
  float* state(int64_t layer) { return state_[layer].data(); }

  int64_t length() const override { return length_; }
  // Back to 0 zeroes the recurrent states (a new sequence); any other step
  // back is refused where a layer keeps one.
  void set_length(int64_t n) override;
  int64_t max_positions() const override { return max_positions_; }
  bool can_rewind_to(int64_t n) const override;
  bool keeps_state() const override { return has_state_; }
  void save(std::ostream& out) const override;
  void load(std::istream& in) override;
  uint64_t bytes() const override;
  std::unique_ptr<CacheSnapshot> snapshot() const override;
  void restore(const CacheSnapshot& s) override;
  bool can_restore(const CacheSnapshot& s) const override;
  std::unique_ptr<CacheSnapshot> load_snapshot(std::istream& in) override;
  // Bytes a cache of `shape` holds at max_positions (for the RAM budget).
  static uint64_t bytes_at(const CacheShape& shape);
  // Bytes a snapshot of a cache of `shape` holds (its recurrent states).
  static uint64_t snapshot_bytes_at(const CacheShape& shape);

 private:
  int64_t slot(int64_t layer, int64_t pos) const { return ring_[layer] ? pos % ring_[layer] : pos; }
  // Whether the rows per position that [0, n) attend to are all still held.
  bool rows_hold(int64_t n) const;

  int64_t key_width_, value_width_;
  int64_t max_positions_;
  std::vector<int64_t> ring_;    // per layer: ring size, 0 = grows
  std::vector<int64_t> window_;  // per layer: sliding window, 0 = none
  int64_t capacity_ = 0;       // of the growing layers
  int64_t length_ = 0;
  std::vector<std::vector<float>> keys_, values_;
  std::vector<std::vector<float>> state_;  // per layer; empty where a layer keeps rows
  bool has_state_ = false;
};

}  // namespace strata
