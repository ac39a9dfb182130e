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
  // Whether it holds the expert (marking nothing).
  bool contains(uint64_t key) const { return where_.count(key) != 0; }
  // Room for an expert of `bytes` (its arrays, each 256-aligned): a free
  // slot of that size, a new one within the budget, or the least recently
  // used one of that size; null when there is none (every slot of the size
  // is read by this submission, or the budget went to other sizes). The
  // caller writes the expert there, then commit()s it (or abandon()s the slot).
  struct Slot {
    uint64_t address = 0;
    uint8_t* mapped = nullptr;
    VkBuffer buffer = VK_NULL_HANDLE;
    uint64_t offset = 0;
  };
  const Slot* reserve(uint64_t key, uint64_t bytes, uint64_t epoch, size_t* slot_index);
  void commit(size_t slot_index, const Entry& e);
  // A reserved slot whose upload failed: free again, holding nothing.
  void abandon(size_t slot_index);
  // Keeps a cached expert for good: never evicted (a layer the backend holds
  // whole, VulkanBackend::hold_layer). False when it is not cached.
  bool pin(uint64_t key);
  // Device memory the cache holds.
  uint64_t bytes() const { return held_; }

 private:
  // Slots of one size: a model's experts come in few sizes (a GGUF may keep
  // some layers' experts in a larger quantization than the rest), and each
  // size has its own. The budget is shared: a size takes slots as its
  // experts come while there is room, then reuses its own.
  struct Pool {
    uint64_t slot_bytes = 0;
    size_t capacity = 0;       // slots its buffers hold
    std::vector<size_t> free;  // handed out, then given back empty
  };
  const Context& ctx_;
  uint64_t budget_;
  uint64_t held_ = 0;
  std::vector<Pool> pools_;
  std::vector<Buffer> buffers_;
  std::vector<Slot> slots_;
  std::vector<size_t> pool_of_;       // per slot
  std::vector<Entry> entries_;        // per slot
  std::unordered_map<uint64_t, size_t> where_;  // key -> slot
  std::list<size_t> lru_;             // slots holding an expert, least recently used first
  std::vector<std::list<size_t>::iterator> in_lru_;  // lru_.end() for a free or pinned slot
  std::vector<bool> pinned_;          // per slot
  size_t pool_for(uint64_t bytes);
  bool grow(Pool& pool, size_t pool_index);
};

}  // namespace strata::vk
