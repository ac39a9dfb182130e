#include "vulkan/vk_pipeline_stats.h"

#include <cstdio>
#include <string>
#include <vector>

namespace strata::vk {

namespace {

std::string value_text(const VkPipelineExecutableStatisticKHR& s) {
  switch (s.format) {
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: return s.value.b32 ? "true" : "false";
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: return std::to_string(s.value.i64);
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: return std::to_string(s.value.u64);
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR: return std::to_string(s.value.f64);
    default: return "?";
  }
}

}  // namespace

void print_pipeline_statistics(VkDevice device, VkPipeline pipeline, std::string_view name) {
  auto properties = reinterpret_cast<PFN_vkGetPipelineExecutablePropertiesKHR>(
      vkGetDeviceProcAddr(device, "vkGetPipelineExecutablePropertiesKHR"));
  auto statistics = reinterpret_cast<PFN_vkGetPipelineExecutableStatisticsKHR>(
      vkGetDeviceProcAddr(device, "vkGetPipelineExecutableStatisticsKHR"));
  if (!properties || !statistics) return;
  VkPipelineInfoKHR info{VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR};
  info.pipeline = pipeline;
  uint32_t executables = 0;
  if (properties(device, &info, &executables, nullptr) != VK_SUCCESS) return;
  for (uint32_t e = 0; e < executables; ++e) {
    VkPipelineExecutableInfoKHR ei{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR};
    ei.pipeline = pipeline;
    ei.executableIndex = e;
    uint32_t count = 0;
    if (statistics(device, &ei, &count, nullptr) != VK_SUCCESS) continue;
    std::vector<VkPipelineExecutableStatisticKHR> stats(count, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR});
    if (statistics(device, &ei, &count, stats.data()) != VK_SUCCESS) continue;
    std::string line = "vk pipeline " + std::string(name) + ":";
    for (uint32_t i = 0; i < count; ++i) line += std::string(i ? ", " : " ") + stats[i].name + "=" + value_text(stats[i]);
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

}  // namespace strata::vk
