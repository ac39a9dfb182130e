#include "vulkan/vk_buffer.h"

#include <string>
#include <utility>

#include "util/error.h"

namespace strata::vk {

Buffer::Buffer(const Context& ctx, uint64_t bytes, Where where) : device_(ctx.device()), bytes_(bytes) {
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.size = bytes ? bytes : 4;
  // Any buffer may hold a grid an op computed (Stream::dispatch_indirect).
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT |
             VK_BUFFER_USAGE_INDIRECT_BUFFER_BIT |
             VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  check(vkCreateBuffer(device_, &bi, nullptr, &buffer_), "vkCreateBuffer");
  // A throw below must not leak what was made so far (a destructor does
  // not run for a constructor that throws).
  try {
    VkMemoryRequirements req{};
    vkGetBufferMemoryRequirements(device_, buffer_, &req);
    const bool host = where != Where::Device;
    const VkMemoryPropertyFlags want = host ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
                                            : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    const VkMemoryPropertyFlags prefer =
        where == Where::Host   ? VK_MEMORY_PROPERTY_HOST_CACHED_BIT
        : where == Where::Args ? VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
        : ctx.unified_memory() ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
                               : 0;
    VkMemoryAllocateFlagsInfo flags{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
    flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ai.pNext = &flags;
    ai.allocationSize = req.size;
    ai.memoryTypeIndex = ctx.memory_type(req.memoryTypeBits, want, prefer);
    VkResult r = vkAllocateMemory(device_, &ai, nullptr, &memory_);
    if (r != VK_SUCCESS && where == Where::Args) {
      // The device's own host-visible memory is small (256 MiB without
      // resizable BAR) and may be full: host memory serves, more slowly.
      ai.memoryTypeIndex = ctx.memory_type(req.memoryTypeBits, want, VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
      r = vkAllocateMemory(device_, &ai, nullptr, &memory_);
    }
    if (r != VK_SUCCESS) {
      memory_ = VK_NULL_HANDLE;
      throw Error("Vulkan: " + ctx.info().name + " could not allocate " + std::to_string(bytes >> 20) + " MiB of " +
                  (host ? "host-visible" : "device") + " memory (VkResult " + std::to_string(r) + ")");
    }
    check(vkBindBufferMemory(device_, buffer_, memory_, 0), "vkBindBufferMemory");
    VkBufferDeviceAddressInfo ad{VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO};
    ad.buffer = buffer_;
    address_ = vkGetBufferDeviceAddress(device_, &ad);
    if ((ctx.memory_flags(ai.memoryTypeIndex) & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) && (host || !ctx.as_discrete())) {
      void* p = nullptr;
      if (vkMapMemory(device_, memory_, 0, VK_WHOLE_SIZE, 0, &p) == VK_SUCCESS) mapped_ = static_cast<uint8_t*>(p);
      if (host && !mapped_) throw Error("Vulkan: could not map host-visible memory");
    }
  } catch (...) {
    reset();
    throw;
  }
}

Buffer::Buffer(const Context& ctx, void* host, uint64_t bytes) : device_(ctx.device()), bytes_(bytes) {
  const uint64_t align = ctx.host_import_alignment();
  if (align == 0 || bytes == 0 || reinterpret_cast<uintptr_t>(host) % align != 0 || bytes % align != 0)
    throw Error("internal: host memory imported where the device cannot, or not aligned to its import alignment");
  constexpr auto kHandle = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
  const auto properties = reinterpret_cast<PFN_vkGetMemoryHostPointerPropertiesEXT>(
      vkGetDeviceProcAddr(device_, "vkGetMemoryHostPointerPropertiesEXT"));
  if (!properties) throw Error("Vulkan: " + ctx.info().name + " offers no vkGetMemoryHostPointerPropertiesEXT");
  constexpr VkBufferUsageFlags kUsage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                        VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT;
  // A buffer of such memory, for these uses, of this size: what the device says it takes.
  VkPhysicalDeviceExternalBufferInfo query{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_BUFFER_INFO};
  query.usage = kUsage;
  query.handleType = kHandle;
  VkExternalBufferProperties offered{VK_STRUCTURE_TYPE_EXTERNAL_BUFFER_PROPERTIES};
  vkGetPhysicalDeviceExternalBufferProperties(ctx.physical(), &query, &offered);
  if (!(offered.externalMemoryProperties.externalMemoryFeatures & VK_EXTERNAL_MEMORY_FEATURE_IMPORTABLE_BIT))
    throw Error("Vulkan: " + ctx.info().name + " does not import host memory as such a buffer");
  if (bytes > ctx.max_allocation_bytes() || bytes > ctx.max_buffer_bytes())
    throw Error("Vulkan: " + ctx.info().name + " takes no buffer of " + std::to_string(bytes >> 20) + " MiB");
  VkMemoryHostPointerPropertiesEXT hp{VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
  check(properties(device_, kHandle, host, &hp), "vkGetMemoryHostPointerPropertiesEXT");
  VkExternalMemoryBufferCreateInfo external{VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO};
  external.handleTypes = kHandle;
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.pNext = &external;
  bi.size = bytes;
  bi.usage = kUsage;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  check(vkCreateBuffer(device_, &bi, nullptr, &buffer_), "vkCreateBuffer");
  try {
    VkMemoryRequirements req{};
    vkGetBufferMemoryRequirements(device_, buffer_, &req);
    const uint32_t types = req.memoryTypeBits & hp.memoryTypeBits;
    if (types == 0 || req.size > bytes)
      throw Error("Vulkan: " + ctx.info().name + " has no memory type to import host memory as a buffer");
    VkImportMemoryHostPointerInfoEXT import{VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT};
    import.handleType = kHandle;
    import.pHostPointer = host;
    VkMemoryAllocateFlagsInfo flags{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
    flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
    flags.pNext = &import;
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ai.pNext = &flags;
    ai.allocationSize = bytes;
    // Coherent: the host writes it (reads land there) with no flush.
    ai.memoryTypeIndex =
        ctx.memory_type(types, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
    const VkResult r = vkAllocateMemory(device_, &ai, nullptr, &memory_);
    if (r != VK_SUCCESS) {
      memory_ = VK_NULL_HANDLE;
      throw Error("Vulkan: " + ctx.info().name + " could not import " + std::to_string(bytes >> 20) +
                  " MiB of host memory (VkResult " + std::to_string(r) + ")");
    }
    check(vkBindBufferMemory(device_, buffer_, memory_, 0), "vkBindBufferMemory");
    VkBufferDeviceAddressInfo ad{VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO};
    ad.buffer = buffer_;
    address_ = vkGetBufferDeviceAddress(device_, &ad);
    mapped_ = static_cast<uint8_t*>(host);
  } catch (...) {
    reset();
    throw;
  }
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    device_ = std::exchange(o.device_, VK_NULL_HANDLE);
    buffer_ = std::exchange(o.buffer_, VK_NULL_HANDLE);
    memory_ = std::exchange(o.memory_, VK_NULL_HANDLE);
    address_ = std::exchange(o.address_, 0);
    bytes_ = std::exchange(o.bytes_, 0);
    mapped_ = std::exchange(o.mapped_, nullptr);
  }
  return *this;
}

void Buffer::reset() {
  if (buffer_) vkDestroyBuffer(device_, buffer_, nullptr);
  if (memory_) vkFreeMemory(device_, memory_, nullptr);
  buffer_ = VK_NULL_HANDLE;
  memory_ = VK_NULL_HANDLE;
  mapped_ = nullptr;
  address_ = 0;
}

}  // namespace strata::vk
