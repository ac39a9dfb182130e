#pragma once
// The Vulkan backend: tensors, step scratch and (soon) KV caches in device
// memory, ops as compute shaders (src/vulkan/*.comp) recorded into one
// command stream that is submitted when the host needs a result (download(),
// route()) or the host staging fills.
//
// Bits. Products keep kernels/linear.h's order (16 lanes by fma, the fixed
// fold tree) and every weight is dequantized by the CPU kernels' formulas;
// the other ops keep the CPU's orders (backend.h). Each value is computed by
// a fixed group of invocations in a fixed order, with no atomics, whatever
// else shares its step, so a token's logits are the same bits at any batch
// size, in prefill or decode, run after run. They are not the CPU's bits:
// Vulkan lets exp, tanh, sqrt and division differ from the C++ library's in
// the last places, and a driver may evaluate fma unfused; logits agree with
// the CPU's to about 1e-5 (tests/vulkan_backend_test.cpp).
//
// Memory. The trunk's weights are copied to the device on first use and kept
// (vk_weights.h). A routed expert is kept in the device's expert cache
// (vk_expert_cache.h, --vram) once it has run, by (layer, expert); one the
// cache cannot hold is copied into host staging for the call and read from
// there.
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace strata {

// The backend on Vulkan device `index` (vk::list_devices()), or the best
// usable one for index < 0. Throws strata::Error naming why no device could
// be used.
// vram_bytes: the expert cache's budget in device memory; < 0: half the
// device's memory on a GPU with memory of its own, none on one that computes
// in host memory (a CPU driver, where staged experts are read in place).
std::unique_ptr<Backend> make_vulkan_backend(int index, int64_t vram_bytes = -1);

// One line per Vulkan device the loader lists (index, name, type, memory,
// and why strata cannot use it where it cannot); `error` set when there are none.
std::vector<std::string> describe_vulkan_devices(std::string* error);

// The index of the best usable GPU (discrete before integrated before
// virtual; never a CPU implementation), or -1 with `error` saying why none.
int best_vulkan_gpu(std::string* error);

}  // namespace strata
