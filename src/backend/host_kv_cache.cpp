#include "backend/host_kv_cache.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace strata {

HostKvCache::HostKvCache(const CacheShape& shape)
    : book_(shape), keys_(shape.layers), values_(shape.layers), state_(shape.layers) {
  for (int64_t l = 0; l < book_.layers(); ++l) {
    if (book_.state_floats(l)) {
      state_[l].assign(static_cast<size_t>(book_.state_floats(l)), 0.0f);
    } else if (book_.ring(l)) {
      keys_[l].resize(static_cast<size_t>(book_.ring(l) * book_.key_width()));
      values_[l].resize(static_cast<size_t>(book_.ring(l) * book_.value_width()));
    }
  }
}

void HostKvCache::ensure(int64_t n) {
  const int64_t cap = book_.capacity_for(n);
  if (cap == book_.capacity()) return;
  for (int64_t l = 0; l < book_.layers(); ++l) {
    if (book_.ring(l) || book_.state_floats(l)) continue;
    keys_[l].resize(static_cast<size_t>(cap * book_.key_width()));
    values_[l].resize(static_cast<size_t>(cap * book_.value_width()));
  }
  book_.set_capacity(cap);
}

void HostKvCache::set_length(int64_t n) {
  if (book_.set_length(n))
    for (auto& s : state_) std::fill(s.begin(), s.end(), 0.0f);
}

void HostKvCache::restore(const CacheSnapshot& s) {
  bool foreign = false;
  const auto* states = book_.restorable(this, s, &foreign);
  if (foreign) throw Error("internal: a cache snapshot restored into another cache");
  if (!states)
    throw Error("the cache no longer holds what the snapshot at position " + std::to_string(s.length()) + " needs");
  for (size_t l = 0; l < state_.size(); ++l) std::copy((*states)[l].begin(), (*states)[l].end(), state_[l].begin());
  book_.restored(s.length());
}

void HostKvCache::save(std::ostream& out) const {
  book_.save_header(out);
  for (int64_t l = 0; l < book_.layers(); ++l)
    book_.save_layer(out, l, keys_[l].data(), values_[l].data(), state_[l].data());
}

void HostKvCache::load(std::istream& in) {
  const int64_t length = book_.load_header(in);
  ensure(length);
  for (int64_t l = 0; l < book_.layers(); ++l)
    book_.load_layer(in, l, length, keys_[l].data(), values_[l].data(), state_[l].data());
  book_.restored(length);
}

uint64_t HostKvCache::bytes() const {
  uint64_t b = 0;
  for (int64_t l = 0; l < book_.layers(); ++l) b += (keys_[l].size() + values_[l].size() + state_[l].size()) * sizeof(float);
  return b;
}

}  // namespace strata
