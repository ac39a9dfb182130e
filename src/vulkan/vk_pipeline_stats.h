#pragma once
// The driver's statistics of a compiled compute pipeline on stderr, one
// line: "vk pipeline NAME: Register Count=..., ..." (whatever the driver
// reports through VK_KHR_pipeline_executable_properties: registers, spills,
// shared memory, instruction counts). For tuning shaders on a real GPU;
// the stream calls it for each pipeline it creates when the context
// enabled the statistics (Context::pipeline_statistics()).
#include <string_view>

#include <vulkan/vulkan.h>

namespace strata::vk {

void print_pipeline_statistics(VkDevice device, VkPipeline pipeline, std::string_view name);

}  // namespace strata::vk
