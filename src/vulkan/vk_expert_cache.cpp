#include "vulkan/vk_expert_cache.h"

#include <algorithm>

#include "util/error.h"

namespace strata::vk {

const ExpertCache::Entry* ExpertCache::find(uint64_t key, uint64_t epoch) {
  auto it = where_.find(key);
  if (it == where_.end()) return nullptr;
  Entry& e = entries_[it->second];
  e.epoch = epoch;
  if (!pinned_[it->second]) lru_.splice(lru_.end(), lru_, in_lru_[it->second]);
  return &e;
}

bool ExpertCache::pin(uint64_t key) {
  auto it = where_.find(key);
  if (it == where_.end()) return false;
  const size_t s = it->second;
  if (!pinned_[s]) {
    pinned_[s] = true;
    lru_.erase(in_lru_[s]);
    in_lru_[s] = lru_.end();
  }
  return true;
}

size_t ExpertCache::pool_for(uint64_t bytes) {
  for (size_t p = 0; p < pools_.size(); ++p)
    if (pools_[p].slot_bytes == bytes) return p;
  pools_.push_back(Pool{bytes});
  return pools_.size() - 1;
}

bool ExpertCache::grow(Pool& pool, size_t pool_index) {
  // A buffer of up to 64 slots (few allocations), within the budget. Where
  // the device has less memory than the budget assumed (the trunk, the KV
  // cache and other programs share it), the cache stays at the size it has.
  const uint64_t per_buffer = std::clamp<uint64_t>((256ull << 20) / pool.slot_bytes, 1, 64);
  const uint64_t room = std::min<uint64_t>(per_buffer, (budget_ - held_) / pool.slot_bytes);
  if (room == 0) return false;
  try {
    buffers_.emplace_back(ctx_, room * pool.slot_bytes, Buffer::Where::Device);
  } catch (const Error&) {
    budget_ = held_;
    return false;
  }
  const Buffer& b = buffers_.back();
  held_ += b.bytes();
  for (uint64_t i = 0; i < room; ++i) {
    const uint64_t at = i * pool.slot_bytes;
    slots_.push_back(Slot{b.address() + at, b.mapped() ? b.mapped() + at : nullptr, b.handle(), at});
    pool_of_.push_back(pool_index);
    entries_.emplace_back();
    in_lru_.push_back(lru_.end());
    pinned_.push_back(false);
    pool.free.push_back(slots_.size() - 1);
  }
  pool.capacity += room;
  return true;
}

const ExpertCache::Slot* ExpertCache::reserve(uint64_t key, uint64_t bytes, uint64_t epoch, size_t* slot_index) {
  if (bytes == 0 || bytes > budget_) return nullptr;
  const size_t p = pool_for(bytes);
  Pool& pool = pools_[p];
  if (pool.free.empty()) grow(pool, p);
  size_t s = slots_.size();
  if (!pool.free.empty()) {
    s = pool.free.back();
    pool.free.pop_back();
  } else {
    // The least recently used slot of this size not read by ops still to run.
    for (size_t cand : lru_)
      if (pool_of_[cand] == p && entries_[cand].epoch != epoch) {
        s = cand;
        break;
      }
    if (s == slots_.size()) return nullptr;
    where_.erase(entries_[s].key);
    lru_.erase(in_lru_[s]);
    in_lru_[s] = lru_.end();
  }
  *slot_index = s;
  (void)key;
  return &slots_[s];
}

void ExpertCache::abandon(size_t s) { pools_[pool_of_[s]].free.push_back(s); }

void ExpertCache::commit(size_t s, const Entry& e) {
  entries_[s] = e;
  entries_[s].slot = s;
  where_[e.key] = s;
  in_lru_[s] = lru_.insert(lru_.end(), s);
}

}  // namespace strata::vk
