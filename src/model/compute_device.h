#pragma once
// Where a model computes (--device): the CPU, a Vulkan device, or the best
// Vulkan GPU when there is one and the CPU otherwise.
#include <memory>
#include <string>

#include "backend/backend.h"

namespace strata {

struct ComputeDevice {
  enum class Kind { Cpu, Vulkan, Auto } kind = Kind::Cpu;
  int index = -1;  // vulkan:N (vk list order); -1: the best usable device
  // The GPU's expert cache in bytes (--vram); < 0: the backend's default.
  int64_t vram_bytes = -1;
};

// "cpu", "vulkan", "vulkan:N" or "auto"; throws strata::Error naming the
// choices otherwise.
ComputeDevice parse_device(const std::string& text);

// The backend for `device` on `threads` CPU threads. Auto falls back to the
// CPU when no Vulkan GPU can be used (a CPU implementation such as lavapipe
// does not count: strata's own CPU path is faster) and says why in *notice;
// Vulkan throws strata::Error saying why the device cannot be used.
std::unique_ptr<Backend> open_backend(const ComputeDevice& device, int threads, std::string* notice);

}  // namespace strata
