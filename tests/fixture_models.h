#pragma once
// The reference fixture models (tests/fixtures/models/*/, each made by a
// script under tools/ from transformers or an independent reference), for
// tests that run every one of them.
#include <algorithm>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/compute_device.h"
#include "model/model_config.h"
#include "runtime/loader.h"

namespace strata {

inline std::filesystem::path fixture_models_dir() { return std::filesystem::path(STRATA_FIXTURES_DIR) / "models"; }

// Every fixture model directory (one with a config.json), sorted.
inline std::vector<std::filesystem::path> fixture_model_dirs() {
  std::vector<std::filesystem::path> dirs;
  for (const auto& e : std::filesystem::directory_iterator(fixture_models_dir()))
    if (std::filesystem::exists(e.path() / "config.json")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

// The fixture models with routed experts (what streaming reads); a dense
// one (trained_draft_dense) has none. Told by their config.json alone (what
// open_checkpoint() takes the config from): gtest asks when the test binary
// starts, which every test's run does, and opening each checkpoint there
// took a second of each test under the sanitizers.
inline std::vector<std::filesystem::path> fixture_moe_model_dirs() {
  std::vector<std::filesystem::path> dirs;
  for (const auto& d : fixture_model_dirs()) {
    const ModelConfig c = ModelConfig::from_file((d / "config.json").string());
    for (int64_t l = 0; l < c.num_layers; ++l)
      if (c.layer_is_moe(l)) {
        dirs.push_back(d);
        break;
      }
  }
  return dirs;
}

// A fixture on a device: every test that runs each fixture on the CPU runs it
// on Vulkan too (lavapipe in CI, a GPU where there is one).
struct DeviceCase {
  std::filesystem::path dir;
  const char* device;
};
inline void PrintTo(const DeviceCase& c, std::ostream* os) { *os << c.dir.filename().string() << " on " << c.device; }
inline std::vector<DeviceCase> on_each_device(const std::vector<std::filesystem::path>& dirs) {
  std::vector<DeviceCase> v;
  for (const char* device : {"cpu", "vulkan"}) {
    if (!STRATA_HAVE_VULKAN && device == std::string("vulkan")) continue;  // built without it
    for (const auto& dir : dirs) v.push_back(DeviceCase{dir, device});
  }
  return v;
}
// gtest's name for a case: "<fixture>_<device>".
inline std::string device_case_name(const DeviceCase& c) { return c.dir.filename().string() + "_" + c.device; }
// `o` computing on the case's device.
inline LoadOptions on_device(const DeviceCase& c, LoadOptions o) {
  o.device = parse_device(c.device);
  return o;
}

}  // namespace strata
