#include "backend/host_kv_cache.h"

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

}  // namespace

HostKvCache::HostKvCache(const CacheShape& shape)
    : key_width_(shape.key_width),
      value_width_(shape.value_width),
      max_positions_(shape.max_positions),
      ring_(shape.layers, 0),
      window_(shape.layers, 0),
      keys_(shape.layers),
      values_(shape.layers),
      state_(shape.layers) {
  const int64_t layers = shape.layers, max_batch = shape.max_batch, max_positions = shape.max_positions;
  const std::vector<int64_t>& windows = shape.windows;
  for (int64_t l = 0; l < layers && l < static_cast<int64_t>(windows.size()); ++l) {
    window_[l] = windows[l];
    ring_[l] = ring_size(windows[l], max_batch, max_positions);
    if (ring_[l] == max_positions) ring_[l] = 0;  // the window covers the context: no ring needed
  }
  for (int64_t l = 0; l < layers && l < static_cast<int64_t>(shape.state_floats.size()); ++l)
    if (shape.state_floats[l] > 0) {
      state_[l].assign(static_cast<size_t>(shape.state_floats[l]), 0.0f);
      has_state_ = true;
    }
  for (int64_t l = 0; l < layers; ++l)
    if (ring_[l] && state_[l].empty()) {
      keys_[l].resize(static_cast<size_t>(ring_[l] * key_width_));
      values_[l].resize(static_cast<size_t>(ring_[l] * value_width_));
    }
}

void HostKvCache::ensure(int64_t n) {
  if (n > max_positions_)
    throw Error("the sequence needs " + std::to_string(n) + " positions but the context is " +
                std::to_string(max_positions_) + " (raise --ctx)");
  if (n <= capacity_) return;
  int64_t cap = capacity_ ? capacity_ : 64;
  while (cap < n) cap *= 2;
  cap = std::min(cap, max_positions_);
  for (size_t l = 0; l < keys_.size(); ++l) {
    if (ring_[l] || !state_[l].empty()) continue;
    keys_[l].resize(static_cast<size_t>(cap * key_width_));
    values_[l].resize(static_cast<size_t>(cap * value_width_));
  }
  capacity_ = cap;
}

void HostKvCache::set_length(int64_t n) {
  if (has_state_ && n < length_) {
    if (n != 0) throw Error("internal: a recurrent state cannot step back to position " + std::to_string(n));
    for (auto& s : state_) std::fill(s.begin(), s.end(), 0.0f);
  }
  length_ = n;
}

bool HostKvCache::can_rewind_to(int64_t n) const {
  if (n > length_) return false;
  if (has_state_) return n == length_ || n == 0;
  return rows_hold(n);
}

namespace {

class HostSnapshot final : public CacheSnapshot {
 public:
  HostSnapshot(const HostKvCache* owner, int64_t length, std::vector<std::vector<float>> states)
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
  const HostKvCache* owner;
  int64_t length_;
  std::vector<std::vector<float>> states;  // per layer; empty where a layer keeps rows
};

}  // namespace

std::unique_ptr<CacheSnapshot> HostKvCache::snapshot() const {
  return std::make_unique<HostSnapshot>(this, length_, state_);
}

bool HostKvCache::can_restore(const CacheSnapshot& s) const {
  const auto* h = dynamic_cast<const HostSnapshot*>(&s);
  return h && h->owner == this && h->length_ <= length_ && rows_hold(h->length_);
}

void HostKvCache::restore(const CacheSnapshot& s) {
  const auto* h = dynamic_cast<const HostSnapshot*>(&s);
  if (!h || h->owner != this) throw Error("internal: a cache snapshot restored into another cache");
  if (!can_restore(s))
    throw Error("the cache no longer holds what the snapshot at position " + std::to_string(h->length_) + " needs");
  for (size_t l = 0; l < state_.size(); ++l) std::copy(h->states[l].begin(), h->states[l].end(), state_[l].begin());
  length_ = h->length_;
}

std::unique_ptr<CacheSnapshot> HostKvCache::load_snapshot(std::istream& in) {
  const int64_t length = get(in);
  if (length < 0 || length > length_) throw Error("a KV cache snapshot lies ahead of its cache");
  if (get(in) != static_cast<int64_t>(state_.size())) throw Error("a KV cache snapshot is for another model shape");
  std::vector<std::vector<float>> states(state_.size());
  for (size_t l = 0; l < state_.size(); ++l) {
    if (get(in) != static_cast<int64_t>(state_[l].size()))
      throw Error("a KV cache snapshot holds another recurrent state size");
    states[l].resize(state_[l].size());
    in.read(reinterpret_cast<char*>(states[l].data()), static_cast<std::streamsize>(states[l].size() * sizeof(float)));
    if (!in) throw Error("KV cache data is truncated");
  }
  return std::make_unique<HostSnapshot>(this, length, std::move(states));
}

bool HostKvCache::rows_hold(int64_t n) const {
  for (size_t l = 0; l < ring_.size(); ++l)
    if (ring_[l] && length_ - ring_[l] > n - window_[l]) return false;  // rows n-window .. n-1 must remain
  return true;
}

void HostKvCache::save(std::ostream& out) const {
  put(out, static_cast<int64_t>(keys_.size()));
  put(out, key_width_);
  put(out, value_width_);
  put(out, length_);
  for (size_t l = 0; l < keys_.size(); ++l) {
    const int64_t rows = !state_[l].empty() ? 0 : ring_[l] ? ring_[l] : length_;
    put(out, ring_[l]);
    out.write(reinterpret_cast<const char*>(keys_[l].data()), static_cast<std::streamsize>(rows * key_width_ * sizeof(float)));
    out.write(reinterpret_cast<const char*>(values_[l].data()),
              static_cast<std::streamsize>(rows * value_width_ * sizeof(float)));
    if (!state_[l].empty()) {  // only layers that keep one: other models' files are as before
      put(out, static_cast<int64_t>(state_[l].size()));
      out.write(reinterpret_cast<const char*>(state_[l].data()), static_cast<std::streamsize>(state_[l].size() * sizeof(float)));
    }
  }
}

void HostKvCache::load(std::istream& in) {
  if (get(in) != static_cast<int64_t>(keys_.size()) || get(in) != key_width_ || get(in) != value_width_)
    throw Error("KV cache data is for another model shape");
  const int64_t length = get(in);
  if (length < 0 || length > max_positions_) throw Error("KV cache data holds more positions than the context");
  ensure(length);
  for (size_t l = 0; l < keys_.size(); ++l) {
    if (get(in) != ring_[l]) throw Error("KV cache data was made with another sliding-window ring size");
    const int64_t rows = !state_[l].empty() ? 0 : ring_[l] ? ring_[l] : length;
    in.read(reinterpret_cast<char*>(keys_[l].data()), static_cast<std::streamsize>(rows * key_width_ * sizeof(float)));
    in.read(reinterpret_cast<char*>(values_[l].data()), static_cast<std::streamsize>(rows * value_width_ * sizeof(float)));
    if (!state_[l].empty()) {
      if (get(in) != static_cast<int64_t>(state_[l].size())) throw Error("KV cache data holds another recurrent state size");
      in.read(reinterpret_cast<char*>(state_[l].data()), static_cast<std::streamsize>(state_[l].size() * sizeof(float)));
    }
    if (!in) throw Error("KV cache data is truncated");
  }
  length_ = length;
}

uint64_t HostKvCache::bytes() const {
  uint64_t b = 0;
  for (size_t l = 0; l < keys_.size(); ++l) b += (keys_[l].size() + values_[l].size() + state_[l].size()) * sizeof(float);
  return b;
}

uint64_t HostKvCache::snapshot_bytes_at(const CacheShape& shape) {
  uint64_t states = 0;
  for (int64_t l = 0; l < shape.layers && l < static_cast<int64_t>(shape.state_floats.size()); ++l)
    states += static_cast<uint64_t>(std::max<int64_t>(shape.state_floats[l], 0));
  return states * sizeof(float);
}

uint64_t HostKvCache::bytes_at(const CacheShape& shape) {
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
