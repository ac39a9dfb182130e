#pragma once
// The backend's compute shaders as SPIR-V, compiled from src/vulkan/*.comp
// by glslc at build time and embedded here (cmake/vulkan_shaders.cmake). A
// shader that reads weights exists once per format: "<name>_<format>" (the
// format names of vk_formats.h).
#include <cstddef>
#include <cstdint>
#include <span>

namespace strata::vk {

struct Shader {
  const char* name;
  const uint32_t* words;
  size_t count;
};

std::span<const Shader> shaders();

}  // namespace strata::vk
