#include "vulkan/vk_context.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>

#include "util/error.h"

namespace strata::vk {

void check(VkResult r, const char* what) {
  if (r != VK_SUCCESS) throw Error(std::string("Vulkan: ") + what + " failed (VkResult " + std::to_string(r) + ")");
}

namespace {

// The instance: Vulkan 1.2, and portability enumeration where the loader has
// it (MoltenVK lists its devices only then).
VkInstance make_instance(std::string* error) {
  uint32_t count = 0;
  if (vkEnumerateInstanceExtensionProperties(nullptr, &count, nullptr) != VK_SUCCESS) {
    if (error) *error = "the Vulkan loader found no driver";
    return VK_NULL_HANDLE;
  }
  std::vector<VkExtensionProperties> exts(count);
  vkEnumerateInstanceExtensionProperties(nullptr, &count, exts.data());
  std::vector<const char*> enable;
  VkInstanceCreateFlags flags = 0;
  for (const auto& e : exts)
    if (std::string(e.extensionName) == VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME) {
      enable.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
      flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
    }
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "strata";
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.flags = flags;
  ci.pApplicationInfo = &app;
  ci.enabledExtensionCount = static_cast<uint32_t>(enable.size());
  ci.ppEnabledExtensionNames = enable.data();
  VkInstance instance = VK_NULL_HANDLE;
  const VkResult r = vkCreateInstance(&ci, nullptr, &instance);
  if (r != VK_SUCCESS) {
    if (error) *error = "no Vulkan 1.2 instance (VkResult " + std::to_string(r) + "): no driver installed?";
    return VK_NULL_HANDLE;
  }
  return instance;
}

std::vector<VkPhysicalDevice> physical_devices(VkInstance instance) {
  uint32_t n = 0;
  vkEnumeratePhysicalDevices(instance, &n, nullptr);
  std::vector<VkPhysicalDevice> v(n);
  if (n) vkEnumeratePhysicalDevices(instance, &n, v.data());
  v.resize(n);
  return v;
}

struct Features {
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  Features() {
    f2.pNext = &f11;
    f11.pNext = &f12;
  }
};

bool has_device_extension(VkPhysicalDevice pd, const char* name) {
  uint32_t n = 0;
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> exts(n);
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, exts.data());
  for (const auto& e : exts)
    if (std::string(e.extensionName) == name) return true;
  return false;
}

int compute_family(VkPhysicalDevice pd) {
  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, nullptr);
  std::vector<VkQueueFamilyProperties> fams(n);
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, fams.data());
  for (uint32_t i = 0; i < n; ++i)
    if (fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) return static_cast<int>(i);
  return -1;
}

DeviceInfo describe(VkPhysicalDevice pd, uint32_t index) {
  VkPhysicalDeviceProperties p{};
  vkGetPhysicalDeviceProperties(pd, &p);
  DeviceInfo d;
  d.index = index;
  d.name = p.deviceName;
  d.type = p.deviceType;
  d.api_version = p.apiVersion;
  VkPhysicalDeviceMemoryProperties m{};
  vkGetPhysicalDeviceMemoryProperties(pd, &m);
  for (uint32_t h = 0; h < m.memoryHeapCount; ++h)
    if (m.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      d.device_local_bytes = std::max<uint64_t>(d.device_local_bytes, m.memoryHeaps[h].size);
  std::vector<std::string> missing;
  if (p.apiVersion < VK_API_VERSION_1_2) missing.push_back("Vulkan 1.2");
  Features f;
  if (p.apiVersion >= VK_API_VERSION_1_2) {
    vkGetPhysicalDeviceFeatures2(pd, &f.f2);
    if (!f.f12.bufferDeviceAddress) missing.push_back("bufferDeviceAddress");
    if (!f.f12.storageBuffer8BitAccess) missing.push_back("storageBuffer8BitAccess");
    if (!f.f11.storageBuffer16BitAccess) missing.push_back("storageBuffer16BitAccess");
    if (!f.f12.shaderInt8) missing.push_back("shaderInt8");
    if (!f.f2.features.shaderInt16) missing.push_back("shaderInt16");
  }
  if (p.limits.maxPushConstantsSize < 128) missing.push_back("128 bytes of push constants");
  // linear_il.comp takes about 22 KiB (Q4_K: 27 KiB); Vulkan promises 16.
  if (p.limits.maxComputeSharedMemorySize < 32768) missing.push_back("32 KiB of shared memory for compute");
  if (compute_family(pd) < 0) missing.push_back("a compute queue");
  for (size_t i = 0; i < missing.size(); ++i) d.unusable += (i ? ", " : "lacks ") + missing[i];
  return d;
}

int rank(const DeviceInfo& d) {
  switch (d.type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
  }
}

}  // namespace

std::vector<DeviceInfo> list_devices(std::string* error) {
  VkInstance instance = make_instance(error);
  if (!instance) return {};
  std::vector<DeviceInfo> out;
  const auto pds = physical_devices(instance);
  for (uint32_t i = 0; i < pds.size(); ++i) out.push_back(describe(pds[i], i));
  vkDestroyInstance(instance, nullptr);
  if (out.empty() && error) *error = "the Vulkan driver lists no device";
  return out;
}

Context::Context(int index) {
  std::string why;
  instance_ = make_instance(&why);
  if (!instance_) throw Error("no Vulkan device: " + why);
  const auto pds = physical_devices(instance_);
  int pick = -1;
  if (index >= 0) {
    if (static_cast<size_t>(index) >= pds.size()) {
      vkDestroyInstance(instance_, nullptr);
      throw Error("no Vulkan device " + std::to_string(index) + ": the driver lists " + std::to_string(pds.size()));
    }
    info_ = describe(pds[static_cast<size_t>(index)], static_cast<uint32_t>(index));
    if (!info_.unusable.empty()) {
      vkDestroyInstance(instance_, nullptr);
      throw Error("Vulkan device " + std::to_string(index) + " (" + info_.name + ") " + info_.unusable);
    }
    pick = index;
  } else {
    std::string reasons;
    for (uint32_t i = 0; i < pds.size(); ++i) {
      DeviceInfo d = describe(pds[i], i);
      if (!d.unusable.empty()) {
        reasons += "; " + d.name + " " + d.unusable;
        continue;
      }
      if (pick < 0 || rank(d) < rank(info_)) {
        info_ = d;
        pick = static_cast<int>(i);
      }
    }
    if (pick < 0) {
      vkDestroyInstance(instance_, nullptr);
      throw Error("no usable Vulkan device" + (pds.empty() ? std::string(": the driver lists none") : reasons));
    }
  }
  physical_ = pds[static_cast<size_t>(pick)];
  vkGetPhysicalDeviceProperties(physical_, &props_);
  {
    VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceMaintenance4Properties m4{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES};
    const bool v13 = props_.apiVersion >= VK_API_VERSION_1_3;
    if (v13) m3.pNext = &m4;
    VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    p2.pNext = &m3;
    vkGetPhysicalDeviceProperties2(physical_, &p2);
    if (m3.maxMemoryAllocationSize > 0) max_allocation_ = m3.maxMemoryAllocationSize;
    if (v13 && m4.maxBufferSize > 0) max_buffer_ = m4.maxBufferSize;
  }
  vkGetPhysicalDeviceMemoryProperties(physical_, &memory_);
  family_ = static_cast<uint32_t>(compute_family(physical_));

  const float priority = 1.0f;
  VkDeviceQueueCreateInfo q{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  q.queueFamilyIndex = family_;
  q.queueCount = 1;
  q.pQueuePriorities = &priority;
  Features f;
  f.f2.features.shaderInt16 = VK_TRUE;
  f.f11.storageBuffer16BitAccess = VK_TRUE;
  f.f12.bufferDeviceAddress = VK_TRUE;
  f.f12.storageBuffer8BitAccess = VK_TRUE;
  f.f12.shaderInt8 = VK_TRUE;
  VkDeviceCreateInfo ci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  ci.pNext = &f.f2;
  ci.queueCreateInfoCount = 1;
  ci.pQueueCreateInfos = &q;
  VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR stats{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
  const char* stats_extension = VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME;
  const char* want_stats = std::getenv("STRATA_VK_PIPELINE_STATS");
  VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR offered{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
  if (want_stats && std::string(want_stats) == "1" && has_device_extension(physical_, stats_extension)) {
    VkPhysicalDeviceFeatures2 query{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    query.pNext = &offered;
    vkGetPhysicalDeviceFeatures2(physical_, &query);
  }
  std::vector<const char*> extensions;
  if (offered.pipelineExecutableInfo) {
    stats.pipelineExecutableInfo = VK_TRUE;
    f.f12.pNext = &stats;
    extensions.push_back(stats_extension);
    pipeline_stats_ = true;
  }
  // Host memory imported as a buffer (a streamed model's RAM expert cache,
  // copied from by the GPU in place): off with STRATA_VK_HOST_IMPORT=0.
  const char* import = std::getenv("STRATA_VK_HOST_IMPORT");
  if (!(import && std::string_view(import) == "0") &&
      has_device_extension(physical_, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME)) {
    VkPhysicalDeviceExternalMemoryHostPropertiesEXT host{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
    VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    p2.pNext = &host;
    vkGetPhysicalDeviceProperties2(physical_, &p2);
    host_import_alignment_ = host.minImportedHostPointerAlignment;
    if (host_import_alignment_ > 0) extensions.push_back(VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
  }
  ci.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  ci.ppEnabledExtensionNames = extensions.data();
  const VkResult r = vkCreateDevice(physical_, &ci, nullptr, &device_);
  if (r != VK_SUCCESS) {
    vkDestroyInstance(instance_, nullptr);
    check(r, "vkCreateDevice");
  }
  vkGetDeviceQueue(device_, family_, 0, &queue_);

  // Unified: a CPU driver or an integrated GPU whose device-local memory is
  // host memory (a device-local type that is host-visible and covers the
  // largest device-local heap), so buffers are written in place. A discrete
  // GPU whose whole memory is mappable (resizable BAR) is not: its memory is
  // still across the bus.
  const bool shares_host_memory = info_.type == VK_PHYSICAL_DEVICE_TYPE_CPU ||
                                  info_.type == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU;
  for (uint32_t t = 0; t < memory_.memoryTypeCount && shares_host_memory; ++t) {
    const auto flags = memory_.memoryTypes[t].propertyFlags;
    const uint64_t heap = memory_.memoryHeaps[memory_.memoryTypes[t].heapIndex].size;
    if ((flags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) && (flags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) &&
        (flags & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) && heap >= info_.device_local_bytes)
      unified_ = true;
  }
  const char* discrete = std::getenv("STRATA_VK_DISCRETE");
  if (discrete != nullptr && *discrete != '\0' && std::string_view(discrete) != "0") {
    as_discrete_ = true;
    unified_ = false;
  }
}

Context::~Context() {
  if (device_) {
    vkDeviceWaitIdle(device_);
    vkDestroyDevice(device_, nullptr);
  }
  if (instance_) vkDestroyInstance(instance_, nullptr);
}

uint32_t Context::memory_type(uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags prefer) const {
  int fallback = -1;
  for (uint32_t t = 0; t < memory_.memoryTypeCount; ++t) {
    if (!(bits & (1u << t))) continue;
    const auto flags = memory_.memoryTypes[t].propertyFlags;
    if ((flags & want) != want) continue;
    if ((flags & prefer) == prefer) return t;
    if (fallback < 0) fallback = static_cast<int>(t);
  }
  if (fallback < 0) throw Error("Vulkan: " + info_.name + " has no memory type with the properties needed");
  return static_cast<uint32_t>(fallback);
}

}  // namespace strata::vk
