#pragma once
// The Vulkan backend's KV cache (backend/kv_cache.h): per layer, rows of f32
// (or the recurrent state) in device memory, kept by backend/cache_book.h's
// rules so it holds, refuses and saves exactly what the host cache does. The
// attention shaders address a layer's rows by device address (keys(),
// values(), state()). Snapshots copy the recurrent states to host memory.
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <vector>

#include "backend/cache_book.h"
#include "backend/kv_cache.h"
#include "vulkan/vk_buffer.h"

namespace strata::vk {

// What a cache needs of the backend that made it.
class CacheIo {
 public:
  virtual ~CacheIo() = default;
  virtual const Context& context() const = 0;
  // Recorded after the ops already recorded.
  virtual void copy_on_device(const Buffer& src, const Buffer& dst, uint64_t bytes) = 0;
  virtual void zero(const Buffer& b) = 0;
  // Waits for every recorded op, then copies.
  virtual void read(const Buffer& src, void* dst, uint64_t bytes) = 0;
  virtual void write(const Buffer& dst, const void* src, uint64_t bytes) = 0;
  // Waits for every recorded op (before a buffer is freed).
  virtual void finish() = 0;
};

class VulkanKvCache final : public KvCache {
 public:
  VulkanKvCache(CacheIo& io, const CacheShape& shape);
  // Runs the ops recorded so far first: they may use its memory.
  ~VulkanKvCache() override;

  const CacheBook& book() const { return book_; }
  uint64_t keys(int64_t layer) const { return keys_[layer].address(); }
  uint64_t values(int64_t layer) const { return values_[layer].address(); }
  uint64_t state(int64_t layer) const { return state_[layer].address(); }
  // Its rows [first, first + count) go into that state next (CacheBook::take_state_rows).
  void take_state_rows(int64_t layer, int64_t first, int64_t count) { book_.take_state_rows(layer, first, count); }
  void check_state_rows(int64_t layer, int64_t first) const { book_.check_state_rows(layer, first); }

  void ensure(int64_t n) override;
  int64_t length() const override { return book_.length(); }
  void set_length(int64_t n) override;
  int64_t max_positions() const override { return book_.max_positions(); }
  bool can_rewind_to(int64_t n) const override { return book_.can_rewind_to(n); }
  bool keeps_state() const override { return book_.keeps_state(); }
  void save(std::ostream& out) const override;
  void load(std::istream& in) override;
  uint64_t bytes() const override;
  std::unique_ptr<CacheSnapshot> snapshot() const override;
  void restore(const CacheSnapshot& s) override;
  bool can_restore(const CacheSnapshot& s) const override { return book_.restorable(this, s, nullptr) != nullptr; }
  std::unique_ptr<CacheSnapshot> load_snapshot(std::istream& in) override { return book_.load_snapshot(this, in); }

 private:
  Buffer rows_buffer(int64_t rows, int64_t width) const;
  CacheIo& io_;
  CacheBook book_;
  std::vector<Buffer> keys_, values_, state_;
};

}  // namespace strata::vk
