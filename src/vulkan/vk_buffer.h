#pragma once
// A Vulkan buffer with its own memory, reachable from shaders by device
// address. Device buffers live in device-local memory; host buffers are
// mapped (host-visible, coherent) for staging and readback; argument buffers
// are mapped too but, where the device has such memory, in its own (shaders
// read an op's small host arguments there without crossing the bus).
#include <cstdint>

#include <vulkan/vulkan.h>

#include "vulkan/vk_context.h"

namespace strata::vk {

class Buffer {
 public:
  enum class Where { Device, Host, Args };
  Buffer() = default;
  // Throws strata::Error when the device cannot give `bytes` (naming them).
  Buffer(const Context& ctx, uint64_t bytes, Where where);
  // The host memory [host, host + bytes) itself, imported (a device with
  // ctx.host_import_alignment(), both aligned to it): the device reads it by
  // DMA, mapped() is `host`. The memory must outlive the buffer. Throws
  // strata::Error when the device does not take it.
  Buffer(const Context& ctx, void* host, uint64_t bytes);
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept { *this = static_cast<Buffer&&>(o); }
  Buffer& operator=(Buffer&& o) noexcept;

  VkBuffer handle() const { return buffer_; }
  VkDeviceAddress address() const { return address_; }
  uint64_t bytes() const { return bytes_; }
  // Host address of a host buffer (or of a device buffer on unified memory); null otherwise.
  uint8_t* mapped() const { return mapped_; }
  explicit operator bool() const { return buffer_ != VK_NULL_HANDLE; }

 private:
  void reset();
  VkDevice device_ = VK_NULL_HANDLE;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  VkDeviceMemory memory_ = VK_NULL_HANDLE;
  VkDeviceAddress address_ = 0;
  uint64_t bytes_ = 0;
  uint8_t* mapped_ = nullptr;
};

}  // namespace strata::vk
