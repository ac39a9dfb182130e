// --device: what parses, and what `auto` picks. On a machine whose only
// Vulkan device is a CPU implementation (CI's lavapipe) auto must run on
// strata's own CPU path and say why in one line; with a GPU it picks it.
#include <gtest/gtest.h>

#include <string>

#include "model/compute_device.h"
#include "util/error.h"
#include "vulkan/vulkan_backend.h"

namespace strata {
namespace {

TEST(ComputeDevice, ParsesEachKindAndRejectsTheRest) {
  EXPECT_EQ(parse_device("cpu").kind, ComputeDevice::Kind::Cpu);
  EXPECT_EQ(parse_device("auto").kind, ComputeDevice::Kind::Auto);
  const ComputeDevice any = parse_device("vulkan");
  EXPECT_EQ(any.kind, ComputeDevice::Kind::Vulkan);
  EXPECT_EQ(any.index, -1);
  const ComputeDevice second = parse_device("vulkan:1");
  EXPECT_EQ(second.kind, ComputeDevice::Kind::Vulkan);
  EXPECT_EQ(second.index, 1);
  for (const char* bad : {"vulkan:", "vulkan:-1", "vulkan:x", "vulkan:1234", "vulkan1", "gpu", "", "CPU"})
    EXPECT_THROW(parse_device(bad), Error) << bad;
}

TEST(ComputeDevice, AutoTakesAGpuOrSaysWhyItComputesOnTheCpu) {
  std::string error;
  const int gpu = best_vulkan_gpu(&error);
  std::string notice;
  const auto backend = open_backend(parse_device("auto"), 1, &notice);
  ASSERT_NE(backend, nullptr);
  if (gpu >= 0) {
    EXPECT_TRUE(notice.empty()) << notice;
    EXPECT_EQ(backend->name().rfind("vulkan", 0), 0u) << backend->name();
  } else {
    EXPECT_FALSE(error.empty());
    EXPECT_NE(notice.find("computing on the CPU"), std::string::npos) << notice;
    EXPECT_EQ(notice.find('\n'), std::string::npos) << notice;
    EXPECT_EQ(backend->name().rfind("cpu", 0), 0u) << backend->name();
  }
}

}  // namespace
}  // namespace strata
