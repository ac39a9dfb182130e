// vulkan_backend.h in a strata built without the Vulkan backend
// (STRATA_VULKAN=OFF): no device is ever listed or opened, and each entry
// point says why in the words the user sees.
#include "util/error.h"
#include "vulkan/vulkan_backend.h"

namespace strata {

namespace {
constexpr const char* kAbsent = "this strata was built without the Vulkan backend (STRATA_VULKAN=OFF)";
}  // namespace

std::unique_ptr<Backend> make_vulkan_backend(int, int64_t) { throw Error(kAbsent); }

std::vector<std::string> describe_vulkan_devices(std::string* error) {
  if (error) *error = kAbsent;
  return {};
}

int best_vulkan_gpu(std::string* error) {
  if (error) *error = kAbsent;
  return -1;
}

}  // namespace strata
