#include "model/compute_device.h"

#include <string>

#include "util/error.h"
#include "vulkan/vulkan_backend.h"

namespace strata {

ComputeDevice parse_device(const std::string& text) {
  ComputeDevice d;
  if (text == "cpu") return d;
  if (text == "auto") {
    d.kind = ComputeDevice::Kind::Auto;
    return d;
  }
  if (text == "vulkan" || text.rfind("vulkan:", 0) == 0) {
    d.kind = ComputeDevice::Kind::Vulkan;
    if (text != "vulkan") {
      const std::string n = text.substr(7);
      if (n.empty() || n.size() > 3 || n.find_first_not_of("0123456789") != std::string::npos)
        throw Error("--device " + text + ": expected vulkan:N with N a device number (strata devices lists them)");
      d.index = std::stoi(n);
    }
    return d;
  }
  throw Error("--device " + text + ": expected cpu, vulkan, vulkan:N or auto");
}

std::unique_ptr<Backend> open_backend(const ComputeDevice& device, int threads, std::string* notice) {
  switch (device.kind) {
    case ComputeDevice::Kind::Cpu: return make_cpu_backend(threads);
    case ComputeDevice::Kind::Vulkan: return make_vulkan_backend(device.index, device.vram_bytes);
    case ComputeDevice::Kind::Auto: break;
  }
  std::string error;
  if (const int gpu = best_vulkan_gpu(&error); gpu >= 0) {
    try {
      return make_vulkan_backend(gpu, device.vram_bytes);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  if (notice) *notice = "no usable Vulkan GPU" + (error.empty() ? std::string() : " (" + error + ")") + ": computing on the CPU";
  return make_cpu_backend(threads);
}

}  // namespace strata
