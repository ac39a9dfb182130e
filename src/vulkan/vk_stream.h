#pragma once
// The backend's queue of work: compute pipelines made from the embedded
// shaders (one pipeline layout for all: 128 bytes of push constants, no
// descriptor sets, since shaders reach memory by device address), and one
// command buffer that ops are recorded into and that finish() submits and
// waits for. Every command is followed by a full memory barrier, so commands
// take effect one after another in the order they were recorded.
// STRATA_VK_DEBUG=1 in the environment runs each dispatch alone and names it
// on stderr: a shader that faults then shows which it was. STRATA_VK_PROFILE=1
// times every command on the GPU (vk_profile.h).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include <vulkan/vulkan.h>

#include "vulkan/vk_buffer.h"
#include "vulkan/vk_context.h"
#include "vulkan/vk_profile.h"

namespace strata::vk {

class Stream {
 public:
  static constexpr uint32_t kPushBytes = 128;
  explicit Stream(const Context& ctx);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Records shader `name` over groups (x, y, z) with `push` as its push
  // constants (at most kPushBytes). Throws strata::Error for an unknown shader.
  void dispatch(std::string_view name, const void* push, uint32_t bytes, uint32_t x, uint32_t y = 1, uint32_t z = 1);
  template <class P>
  void dispatch(std::string_view name, const P& push, uint32_t x, uint32_t y = 1, uint32_t z = 1) {
    static_assert(sizeof(P) <= kPushBytes);
    dispatch(name, &push, sizeof(P), x, y, z);
  }
  void copy(VkBuffer src, uint64_t src_offset, VkBuffer dst, uint64_t dst_offset, uint64_t bytes);
  // Zeroes `bytes` (a multiple of 4) from `offset`.
  void zero(VkBuffer dst, uint64_t offset, uint64_t bytes);
  // Submits what was recorded and waits until it is done (no-op when nothing was).
  void finish();
  bool idle() const { return !recording_; }
  // Commands recorded since the last finish().
  uint64_t recorded() const { return recorded_; }

 private:
  VkPipeline pipeline(std::string_view name);
  void begin();
  // A full barrier after the command just recorded, then its timestamp when profiling.
  void barrier(std::string_view name);

  const Context& ctx_;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  std::unordered_map<std::string, VkPipeline> pipelines_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  bool recording_ = false;
  uint64_t recorded_ = 0;
  std::unique_ptr<Profile> profile_;
};

}  // namespace strata::vk
