#pragma once
// Memory handed out in pieces from a few large buffers, freed all at once:
// the backend's tensors (freed by release_tensors()), the trunk's weights
// (kept for the backend's life) and the host staging of one submission
// (rewound after it finishes). Few buffers, because a device allows only so
// many allocations.
#include <cstdint>
#include <vector>

#include "vulkan/vk_buffer.h"
#include "vulkan/vk_context.h"

namespace strata::vk {

class Arena {
 public:
  struct Piece {
    VkBuffer buffer = VK_NULL_HANDLE;
    uint64_t offset = 0;
    VkDeviceAddress address = 0;
    uint8_t* mapped = nullptr;  // host address where the memory is mapped
  };
  Arena(const Context& ctx, Buffer::Where where, uint64_t chunk_bytes)
      : ctx_(ctx), where_(where), chunk_(chunk_bytes) {}
  // `bytes` at an offset aligned to 256 (every shader's alignment; a device's
  // minimum storage buffer offset alignment is at most 256).
  Piece take(uint64_t bytes);
  // What take(bytes) uses of a buffer (used() grows by it).
  static uint64_t taken(uint64_t bytes) { return bytes < 256 ? 256 : (bytes + 255) / 256 * 256; }
  // Every piece handed out is free again; the buffers stay for reuse.
  void rewind();
  // Frees the buffers too.
  void clear();
  // Bytes handed out since the last rewind or clear, and bytes of the buffers held.
  uint64_t used() const { return used_; }
  uint64_t reserved() const;

 private:
  const Context& ctx_;
  Buffer::Where where_;
  uint64_t chunk_;
  std::vector<Buffer> buffers_;
  size_t current_ = 0;  // the buffer pieces come from
  uint64_t top_ = 0;    // its first free byte
  uint64_t used_ = 0;
};

}  // namespace strata::vk
