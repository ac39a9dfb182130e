#pragma once
// What a KV cache (backend/kv_cache.h) keeps track of besides its memory,
// shared by the host cache and the Vulkan one so both keep the same rows,
// refuse the same rewinds and read and write the same session bytes: per
// layer a growing run of rows, a sliding-window ring or a recurrent state;
// the length; which earlier lengths can still be returned to; and the
// snapshots (recurrent states copied to host memory).
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <vector>

#include "backend/kv_cache.h"

namespace strata {

class CacheBook {
 public:
  explicit CacheBook(const CacheShape& shape);

  int64_t layers() const { return static_cast<int64_t>(ring_.size()); }
  int64_t key_width() const { return key_width_; }
  int64_t value_width() const { return value_width_; }
  int64_t max_positions() const { return max_positions_; }
  // Layer l's ring size (0: its rows grow with the sequence), its recurrent
  // state's size (0: it keeps rows).
  int64_t ring(int64_t l) const { return ring_[l]; }
  int64_t state_floats(int64_t l) const { return state_[l]; }
  // Rows layer l holds now (its ring, the growing capacity, or 0 with a state).
  int64_t rows(int64_t l) const { return state_[l] ? 0 : ring_[l] ? ring_[l] : capacity_; }
  // The row position `pos` of layer l is stored in.
  int64_t slot(int64_t l, int64_t pos) const { return ring_[l] ? pos % ring_[l] : pos; }

  int64_t capacity() const { return capacity_; }
  // The capacity the growing layers need for positions [0, n) (doubling from
  // 64, at most the context); throws strata::Error past the context.
  int64_t capacity_for(int64_t n) const;
  void set_capacity(int64_t c) { capacity_ = c; }

  int64_t length() const { return length_; }
  bool keeps_state() const { return has_state_; }
  // Sets the length; true when the recurrent states must be zeroed (back to
  // 0: a new sequence). Any other step back throws where a layer keeps a state.
  bool set_length(int64_t n);
  // The length a restored snapshot or loaded session comes back at (states
  // restored by the caller).
  void restored(int64_t n);
  // Layer l's recurrent state takes the rows [first, first + count) of one
  // sequence: throws strata::Error unless they continue where that state
  // stopped. A state runs ahead of length() while a step is under way, each
  // layer by itself: a pass wider than a step (model/model.h) takes a
  // layer's rows in several parts before the next layer's; the step's end
  // sets the length they all reached.
  void take_state_rows(int64_t l, int64_t first, int64_t count);
  // The check alone (throws as take_state_rows would; moves nothing).
  void check_state_rows(int64_t l, int64_t first) const;
  bool can_rewind_to(int64_t n) const;
  // Whether the rows per position that [0, n) attend to are all still held.
  bool rows_hold(int64_t n) const;

  // Session bytes: the header, then per layer its rows (saved_rows(l) of
  // keys and of values) and state, as save_layer() writes them.
  void save_header(std::ostream& out) const;
  // Checks the header against this shape; returns the saved length (the
  // caller makes room, then reads the layers).
  int64_t load_header(std::istream& in) const;
  int64_t saved_rows(int64_t l, int64_t length) const { return state_[l] ? 0 : ring_[l] ? ring_[l] : length; }
  void save_layer(std::ostream& out, int64_t l, const float* keys, const float* values, const float* state) const;
  void load_layer(std::istream& in, int64_t l, int64_t length, float* keys, float* values, float* state) const;

  // A snapshot of `owner` at the current length holding copies of its states.
  std::unique_ptr<CacheSnapshot> snapshot(const void* owner, std::vector<std::vector<float>> states) const;
  // The states of `s` when it is one of `owner`'s that restore() can go back
  // to now (null when can_restore() would say no; *foreign: because it is
  // not one of owner's).
  const std::vector<std::vector<float>>* restorable(const void* owner, const CacheSnapshot& s, bool* foreign) const;
  // Reads a snapshot CacheSnapshot::save() wrote, for `owner`.
  std::unique_ptr<CacheSnapshot> load_snapshot(const void* owner, std::istream& in) const;

  // Bytes a cache of `shape` holds at max_positions, and one snapshot of it.
  static uint64_t bytes_at(const CacheShape& shape);
  static uint64_t snapshot_bytes_at(const CacheShape& shape);

 private:
  int64_t key_width_, value_width_, max_positions_;
  std::vector<int64_t> ring_;    // per layer: ring size, 0 = grows
  std::vector<int64_t> window_;  // per layer: sliding window, 0 = none
  std::vector<int64_t> state_;   // per layer: recurrent state floats, 0 = rows
  int64_t capacity_ = 0;         // of the growing layers
  int64_t length_ = 0;
  std::vector<int64_t> state_at_;  // per layer: the position its recurrent state takes next
  bool has_state_ = false;
};

}  // namespace strata
