#include "vulkan/vk_expert_cache.h"

#include <algorithm>

namespace strata::vk {

const ExpertCache::Entry* ExpertCache::find(uint64_t key, uint64_t epoch) {
  auto it = where_.find(key);
  if (it == where_.end()) return nullptr;
  Entry& e = entries_[it->second];
  e.epoch = epoch;
  lru_.splice(lru_.end(), lru_, in_lru_[it->second]);
  return &e;
}

const ExpertCache::Slot* ExpertCache::reserve(uint64_t key, uint64_t bytes, uint64_t epoch, size_t* slot_index) {
  if (slot_bytes_ == 0) slot_bytes_ = bytes;
  if (bytes > slot_bytes_ || slot_bytes_ > budget_) return nullptr;
  size_t s = slots_.size();
  if ((slots_.size() + 1) * slot_bytes_ <= budget_) {
    // A new slot, from a buffer of up to 64 slots (few allocations).
    const size_t per_buffer = static_cast<size_t>(std::clamp<uint64_t>((256ull << 20) / slot_bytes_, 1, 64));
    if (slots_.size() % per_buffer == 0) {
      const uint64_t room = std::min<uint64_t>(per_buffer, (budget_ - slots_.size() * slot_bytes_) / slot_bytes_);
      buffers_.emplace_back(ctx_, room * slot_bytes_, Buffer::Where::Device);
    }
    const Buffer& b = buffers_.back();
    const uint64_t at = (slots_.size() % per_buffer) * slot_bytes_;
    slots_.push_back(Slot{b.address() + at, b.mapped() ? b.mapped() + at : nullptr, b.handle(), at});
    entries_.emplace_back();
    used_.push_back(false);
    in_lru_.push_back(lru_.end());
  } else {
    // The least recently used slot not read by ops still to run.
    s = slots_.size();
    for (size_t cand : lru_)
      if (entries_[cand].epoch != epoch) {
        s = cand;
        break;
      }
    if (s == slots_.size()) return nullptr;
    where_.erase(entries_[s].key);
    lru_.erase(in_lru_[s]);
    used_[s] = false;
  }
  *slot_index = s;
  (void)key;
  return &slots_[s];
}

void ExpertCache::commit(size_t s, const Entry& e) {
  entries_[s] = e;
  entries_[s].slot = s;
  used_[s] = true;
  where_[e.key] = s;
  in_lru_[s] = lru_.insert(lru_.end(), s);
}

}  // namespace strata::vk
