#include "backend/cache_book.h"

#include <algorithm>
#include <istream>
#include <ostream>
#include <string>

#include "util/error.h"

namespace strata {

namespace {

int64_t ring_size(int64_t window, int64_t max_batch, int64_t max_positions) {
  return window > 0 ? std::min(window + max_batch, max_positions) : 0;
}

void put(std::ostream& out, int64_t v) { out.write(reinterpret_cast<const char*>(&v), sizeof v); }
int64_t get(std::istream& in) {
  int64_t v = 0;
  in.read(reinterpret_cast<char*>(&v), sizeof v);
  if (!in) throw Error("KV cache data is truncated");
  return v;
}

class StateSnapshot final : public CacheSnapshot {
 public:
  StateSnapshot(const void* owner, int64_t length, std::vector<std::vector<float>> states)
      : owner(owner), length_(length), states(std::move(states)) {}
  int64_t length() const override { return length_; }
  uint64_t bytes() const override {
    uint64_t b = 0;
    for (const auto& s : states) b += s.size() * sizeof(float);
    return b;
  }
  // The length, then each layer's state size and values (0 and none where a
  // layer keeps rows).
  void save(std::ostream& out) const override {
    put(out, length_);
    put(out, static_cast<int64_t>(states.size()));
    for (const auto& s : states) {
      put(out, static_cast<int64_t>(s.size()));
      out.write(reinterpret_cast<const char*>(s.data()), static_cast<std::streamsize>(s.size() * sizeof(float)));
    }
  }
  const void* owner;
  int64_t length_;
  std::vector<std::vector<float>> states;  // per layer; empty where a layer keeps rows
};

}  // namespace

CacheBook::CacheBook(const CacheShape& shape)
    : key_width_(shape.key_width),
      value_width_(shape.value_width),
      max_positions_(shape.max_positions),
      ring_(shape.layers, 0),
      window_(shape.layers, 0),
      state_(shape.layers, 0),
      state_at_(shape.layers, 0) {
  for (int64_t l = 0; l < shape.layers && l < static_cast<int64_t>(shape.windows.size()); ++l) {
    window_[l] = shape.windows[l];
    ring_[l] = ring_size(shape.windows[l], shape.max_batch, shape.max_positions);
    if (ring_[l] == shape.max_positions) ring_[l] = 0;  // the window covers the context: no ring needed
  }
  for (int64_t l = 0; l < shape.layers && l < static_cast<int64_t>(shape.state_floats.size()); ++l)
    if (shape.state_floats[l] > 0) {
      state_[l] = shape.state_floats[l];
      has_state_ = true;
    }
}

int64_t CacheBook::capacity_for(int64_t n) const {
  if (n > max_positions_)
    throw Error("the sequence needs " + std::to_string(n) + " positions but the context is " +
                std::to_string(max_positions_) + " (raise --ctx)");
  if (n <= capacity_) return capacity_;
  int64_t cap = capacity_ ? capacity_ : 64;
  while (cap < n) cap *= 2;
  return std::min(cap, max_positions_);
}

bool CacheBook::set_length(int64_t n) {
  bool zero = false;
  if (has_state_ && n < length_) {
    if (n != 0) throw Error("internal: a recurrent state cannot step back to position " + std::to_string(n));
    zero = true;
  }
  length_ = n;
  std::fill(state_at_.begin(), state_at_.end(), n);
  return zero;
}

void CacheBook::restored(int64_t n) {
  length_ = n;
  std::fill(state_at_.begin(), state_at_.end(), n);
}

void CacheBook::check_state_rows(int64_t l, int64_t first) const {
  if (first != state_at_[l])
    throw Error("internal: KDA rows must continue their sequence in order (position " + std::to_string(first) +
                ", the state holds " + std::to_string(state_at_[l]) + ")");
}

void CacheBook::take_state_rows(int64_t l, int64_t first, int64_t count) {
  check_state_rows(l, first);
  state_at_[l] = first + count;
}

bool CacheBook::can_rewind_to(int64_t n) const {
  if (n > length_) return false;
  if (has_state_) return n == length_ || n == 0;
  return rows_hold(n);
}

bool CacheBook::rows_hold(int64_t n) const {
  for (size_t l = 0; l < ring_.size(); ++l)
    if (ring_[l] && length_ - ring_[l] > n - window_[l]) return false;  // rows n-window .. n-1 must remain
  return true;
}

void CacheBook::save_header(std::ostream& out) const {
  put(out, layers());
  put(out, key_width_);
  put(out, value_width_);
  put(out, length_);
}

int64_t CacheBook::load_header(std::istream& in) const {
  if (get(in) != layers() || get(in) != key_width_ || get(in) != value_width_)
    throw Error("KV cache data is for another model shape");
  const int64_t length = get(in);
  if (length < 0 || length > max_positions_) throw Error("KV cache data holds more positions than the context");
  return length;
}

void CacheBook::save_layer(std::ostream& out, int64_t l, const float* keys, const float* values,
                           const float* state) const {
  const int64_t rows = saved_rows(l, length_);
  put(out, ring_[l]);
  out.write(reinterpret_cast<const char*>(keys), static_cast<std::streamsize>(rows * key_width_ * sizeof(float)));
  out.write(reinterpret_cast<const char*>(values), static_cast<std::streamsize>(rows * value_width_ * sizeof(float)));
  if (state_[l]) {  // only layers that keep one: other models' files are as before
    put(out, state_[l]);
    out.write(reinterpret_cast<const char*>(state), static_cast<std::streamsize>(state_[l] * sizeof(float)));
  }
}

void CacheBook::load_layer(std::istream& in, int64_t l, int64_t length, float* keys, float* values,
                           float* state) const {
  if (get(in) != ring_[l]) throw Error("KV cache data was made with another sliding-window ring size");
  const int64_t rows = saved_rows(l, length);
  in.read(reinterpret_cast<char*>(keys), static_cast<std::streamsize>(rows * key_width_ * sizeof(float)));
  in.read(reinterpret_cast<char*>(values), static_cast<std::streamsize>(rows * value_width_ * sizeof(float)));
  if (state_[l]) {
    if (get(in) != state_[l]) throw Error("KV cache data holds another recurrent state size");
    in.read(reinterpret_cast<char*>(state), static_cast<std::streamsize>(state_[l] * sizeof(float)));
  }
  if (!in) throw Error("KV cache data is truncated");
}

std::unique_ptr<CacheSnapshot> CacheBook::snapshot(const void* owner, std::vector<std::vector<float>> states) const {
  return std::make_unique<StateSnapshot>(owner, length_, std::move(states));
}

const std::vector<std::vector<float>>* CacheBook::restorable(const void* owner, const CacheSnapshot& s,
                                                              bool* foreign) const {
  const auto* h = dynamic_cast<const StateSnapshot*>(&s);
  if (foreign) *foreign = !h || h->owner != owner;
  if (!h || h->owner != owner || h->length_ > length_ || !rows_hold(h->length_)) return nullptr;
  return &h->states;
}

std::unique_ptr<CacheSnapshot> CacheBook::load_snapshot(const void* owner, std::istream& in) const {
  const int64_t length = get(in);
  if (length < 0 || length > length_) throw Error("a KV cache snapshot lies ahead of its cache");
  if (get(in) != layers()) throw Error("a KV cache snapshot is for another model shape");
  std::vector<std::vector<float>> states(state_.size());
  for (size_t l = 0; l < state_.size(); ++l) {
    if (get(in) != state_[l]) throw Error("a KV cache snapshot holds another recurrent state size");
    states[l].resize(static_cast<size_t>(state_[l]));
    in.read(reinterpret_cast<char*>(states[l].data()), static_cast<std::streamsize>(states[l].size() * sizeof(float)));
    if (!in) throw Error("KV cache data is truncated");
  }
  return std::make_unique<StateSnapshot>(owner, length, std::move(states));
}

uint64_t CacheBook::snapshot_bytes_at(const CacheShape& shape) {
  uint64_t states = 0;
  for (int64_t l = 0; l < shape.layers && l < static_cast<int64_t>(shape.state_floats.size()); ++l)
    states += static_cast<uint64_t>(std::max<int64_t>(shape.state_floats[l], 0));
  return states * sizeof(float);
}

uint64_t CacheBook::bytes_at(const CacheShape& shape) {
  uint64_t rows = 0, states = 0;
  for (int64_t l = 0; l < shape.layers; ++l) {
    const int64_t w = l < static_cast<int64_t>(shape.windows.size()) ? shape.windows[l] : 0;
    const int64_t state = l < static_cast<int64_t>(shape.state_floats.size()) ? shape.state_floats[l] : 0;
    if (state > 0) {
      states += static_cast<uint64_t>(state);
      continue;
    }
    const int64_t r = ring_size(w, shape.max_batch, shape.max_positions);
    rows += static_cast<uint64_t>(r ? r : shape.max_positions);
  }
  return (rows * static_cast<uint64_t>(shape.key_width + shape.value_width) + states) * sizeof(float);
}

}  // namespace strata
