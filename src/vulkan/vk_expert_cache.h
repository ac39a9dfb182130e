#pragma once
// The Vulkan backend's expert cache: copies of routed experts in device
// memory (VRAM) under a byte budget (--vram), kept by (layer, expert) since a
// model's expert never changes, evicted least recently used. An expert in
// use by ops not yet run (since the last finish()) is never evicted: its
// memory may still be read.
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "backend/expert.h"
#include "vulkan/vk_buffer.h"
#include "vulkan/vk_formats.h"

namespace strata::vk {

class ExpertCache {
 public:
  // Device copies of one expert's arrays.
  struct Entry {
    WeightRef gate, up, down, gate_up;
    uint64_t key = 0;
    uint64_t epoch = 0;  // the submission that last used it
    size_t slot = 0;
  };
  ExpertCache(const Context& ctx, uint64_t budget_bytes) : ctx_(ctx), budget_(budget_bytes) {}

  uint64_t budget() const { return budget_; }
  static uint64_t key(int64_t layer, int32_t expert) {
    return (static_cast<uint64_t>(layer) << 32) | static_cast<uint32_t>(expert);
  }
  // The cached expert (marked used in `epoch`), or null.
  const Entry* find(uint64_t key, uint64_t epoch);
  // Room for an expert of `bytes` (its arrays, each 256-aligned): a free or
  // evictable slot, or a new one within the budget; null when there is none
  // (all held by this submission, or the expert is larger than a slot).
  // `place(slot_address, mapped)` then lays the arrays out and returns the entry.
  struct Slot {
    uint64_t address = 0;
    uint8_t* mapped = nullptr;
    VkBuffer buffer = VK_NULL_HANDLE;
    uint64_t offset = 0;
  };
  const Slot* reserve(uint64_t key, uint64_t bytes, uint64_t epoch, size_t* slot_index);
  void commit(size_t slot_index, const Entry& e);
  uint64_t bytes() const { return static_cast<uint64_t>(slots_.size()) * slot_bytes_; }

 private:
  const Context& ctx_;
  uint64_t budget_;
  uint64_t slot_bytes_ = 0;  // the first expert's size: a model's experts share one shape
  std::vector<Buffer> buffers_;
  std::vector<Slot> slots_;
  std::vector<Entry> entries_;        // per slot
  std::vector<bool> used_;            // per slot: holds an expert
  std::unordered_map<uint64_t, size_t> where_;  // key -> slot
  std::list<size_t> lru_;             // slots, least recently used first
  std::vector<std::list<size_t>::iterator> in_lru_;
};

}  // namespace strata::vk
