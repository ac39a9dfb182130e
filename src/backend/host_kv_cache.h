#pragma once
// The CPU backend's KV cache (backend/kv_cache.h): per layer, rows of f32 in
// host memory; the CPU attention ops address them by pointer. Its
// bookkeeping is backend/cache_book.h's.
#include <cstdint>
#include <iosfwd>
#include <vector>

#include "backend/cache_book.h"
#include "backend/kv_cache.h"

namespace strata {

class HostKvCache final : public KvCache {
 public:
  explicit HostKvCache(const CacheShape& shape);

  void ensure(int64_t n) override;

  float* key(int64_t layer, int64_t pos) { return keys_[layer].data() + book_.slot(layer, pos) * book_.key_width(); }
  float* value(int64_t layer, int64_t pos) {
    return values_[layer].data() + book_.slot(layer, pos) * book_.value_width();
  }
  const float* key(int64_t layer, int64_t pos) const {
    return keys_[layer].data() + book_.slot(layer, pos) * book_.key_width();
  }
  const float* value(int64_t layer, int64_t pos) const {
    return values_[layer].data() + book_.slot(layer, pos) * book_.value_width();
  }

  // Layer `layer`'s recurrent state (CacheShape::state_floats values).
  float* state(int64_t layer) { return state_[layer].data(); }
  // Its rows [first, first + count) go into that state next (CacheBook::take_state_rows).
  void take_state_rows(int64_t layer, int64_t first, int64_t count) { book_.take_state_rows(layer, first, count); }
  void check_state_rows(int64_t layer, int64_t first) const { book_.check_state_rows(layer, first); }

  int64_t length() const override { return book_.length(); }
  // Back to 0 zeroes the recurrent states (a new sequence); any other step
  // back is refused where a layer keeps one.
  void set_length(int64_t n) override;
  int64_t max_positions() const override { return book_.max_positions(); }
  bool can_rewind_to(int64_t n) const override { return book_.can_rewind_to(n); }
  bool keeps_state() const override { return book_.keeps_state(); }
  void save(std::ostream& out) const override;
  void load(std::istream& in) override;
  uint64_t bytes() const override;
  std::unique_ptr<CacheSnapshot> snapshot() const override { return book_.snapshot(this, state_); }
  void restore(const CacheSnapshot& s) override;
  bool can_restore(const CacheSnapshot& s) const override { return book_.restorable(this, s, nullptr) != nullptr; }
  std::unique_ptr<CacheSnapshot> load_snapshot(std::istream& in) override { return book_.load_snapshot(this, in); }
  // Bytes a cache of `shape` holds at max_positions (for the RAM budget).
  static uint64_t bytes_at(const CacheShape& shape) { return CacheBook::bytes_at(shape); }
  // Bytes a snapshot of a cache of `shape` holds (its recurrent states).
  static uint64_t snapshot_bytes_at(const CacheShape& shape) { return CacheBook::snapshot_bytes_at(shape); }

 private:
  CacheBook book_;
  std::vector<std::vector<float>> keys_, values_;
  std::vector<std::vector<float>> state_;  // per layer; empty where a layer keeps rows
};

}  // namespace strata
