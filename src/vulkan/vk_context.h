#pragma once
// A Vulkan device opened for compute: the instance, one physical device, its
// logical device with one compute queue, and the memory types buffers come
// from. Everything the backend runs goes through one of these.
//
// What strata needs of a device (checked when it is opened, each missing one
// named in the error): Vulkan 1.2, buffer device addresses (shaders reach all
// memory by address, no descriptors), 8- and 16-bit storage (weights are read
// byte by byte), 8- and 16-bit integer arithmetic in shaders, 128 bytes of
// push constants and 32 KiB of shared memory for a workgroup.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

namespace strata::vk {

// Throws strata::Error naming `what` when `r` is not VK_SUCCESS.
void check(VkResult r, const char* what);

struct DeviceInfo {
  uint32_t index = 0;  // in the loader's enumeration: the N of --device vulkan:N
  std::string name;
  VkPhysicalDeviceType type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
  uint32_t api_version = 0;
  uint64_t device_local_bytes = 0;  // the largest device-local heap
  std::string unusable;             // empty when strata can compute on it, else why not
  bool is_cpu() const { return type == VK_PHYSICAL_DEVICE_TYPE_CPU; }
};

// Every device the Vulkan loader finds (none, with `error` set, when there
// is no loader, no driver or no device).
std::vector<DeviceInfo> list_devices(std::string* error);

class Context {
 public:
  // Opens device `index` of list_devices(), or with index < 0 the best usable
  // one (a discrete GPU before an integrated one before a virtual one before a
  // CPU implementation). Throws strata::Error saying why none could be opened.
  explicit Context(int index);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  VkPhysicalDevice physical() const { return physical_; }
  VkDevice device() const { return device_; }
  VkQueue queue() const { return queue_; }
  uint32_t queue_family() const { return family_; }
  const DeviceInfo& info() const { return info_; }
  const VkPhysicalDeviceProperties& properties() const { return props_; }
  // A memory type of `bits` with all of `want` (and, preferably, `prefer`);
  // throws when none has `want`.
  uint32_t memory_type(uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags prefer = 0) const;
  VkMemoryPropertyFlags memory_flags(uint32_t type) const { return memory_.memoryTypes[type].propertyFlags; }
  // Whether device-local memory is also host-visible on this device (a CPU
  // implementation, unified memory): then nothing needs staging.
  bool unified_memory() const { return unified_; }
  // Whether device buffers stay unmapped even where their memory is
  // host-visible, so every upload and download goes through host staging
  // and a copy command, as on a discrete GPU: STRATA_VK_DISCRETE=1 in the
  // environment, for tests of those paths on a CPU driver (lavapipe).
  bool as_discrete() const { return as_discrete_; }
  // Whether pipelines report the driver's statistics of their compiled code
  // (registers, spills: VK_KHR_pipeline_executable_properties), for tuning:
  // asked for by STRATA_VK_PIPELINE_STATS=1 and offered by the driver.
  bool pipeline_statistics() const { return pipeline_stats_; }
  // The alignment of host memory this device imports as a buffer
  // (VK_EXT_external_memory_host: its start and length), 0 when it cannot.
  uint64_t host_import_alignment() const { return host_import_alignment_; }
  // The largest allocation and buffer the device takes (maintenance3's and,
  // on Vulkan 1.3, maintenance4's limits; unbounded where not reported).
  uint64_t max_allocation_bytes() const { return max_allocation_; }
  uint64_t max_buffer_bytes() const { return max_buffer_; }

 private:
  VkInstance instance_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t family_ = 0;
  DeviceInfo info_;
  VkPhysicalDeviceProperties props_{};
  VkPhysicalDeviceMemoryProperties memory_{};
  bool unified_ = false;
  bool as_discrete_ = false;
  bool pipeline_stats_ = false;
  uint64_t host_import_alignment_ = 0;
  uint64_t max_allocation_ = UINT64_MAX, max_buffer_ = UINT64_MAX;
};

}  // namespace strata::vk
