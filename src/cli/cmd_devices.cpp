// strata devices: the devices --device can name (the CPU, and each Vulkan
// device the loader lists, with why strata cannot use it where it cannot).
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "util/thread_pool.h"
#include "vulkan/vulkan_backend.h"

namespace strata::cli {

void register_devices(CLI::App& app, Action& run) {
  CLI::App* cmd = app.add_subcommand("devices", "List the devices strata can compute on (--device)");
  cmd->callback([&run] {
    run = [] {
      std::printf("cpu  %d threads\n", default_thread_count());
      std::string error;
      const auto lines = describe_vulkan_devices(&error);
      for (const std::string& line : lines) std::printf("%s\n", line.c_str());
      if (lines.empty()) std::printf("no Vulkan device: %s\n", error.c_str());
      return 0;
    };
  });
}

}  // namespace strata::cli
