#include "pack/drive_weights.h"

#include <map>
#include <optional>

#include "storage/probe.h"
#include "util/error.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

// A short probe: one read size and two depths, a second each. Enough to tell
// an NVMe drive from a SATA disk or a network volume, which is what
// placement needs; `strata probe` measures properly.
constexpr uint64_t kShortProbeFile = 256ull << 20;

std::string device_of_folder(const fs::path& dir) {
  const std::string dev = device_of(dir);
  if (dev.empty()) throw Error(dir.string() + ": cannot stat");
  return dev;
}

void say(const std::function<void(const std::string&)>& notice, const std::string& line) {
  if (notice) notice(line);
}

}  // namespace

DriveWeights weigh_drives(const std::vector<fs::path>& dirs, const fs::path& probe_file,
                          const std::function<void(const std::string&)>& notice) {
  // The devices, in the order their first folder was given.
  std::vector<std::string> device(dirs.size());
  std::vector<std::string> order;
  std::map<std::string, std::vector<size_t>> folders;
  for (size_t d = 0; d < dirs.size(); ++d) {
    device[d] = device_of_folder(dirs[d]);
    if (!folders.count(device[d])) order.push_back(device[d]);
    folders[device[d]].push_back(d);
  }
  for (const auto& dev : order) {
    const auto& f = folders[dev];
    if (f.size() < 2) continue;
    std::string names;
    for (size_t i : f) names += (names.empty() ? "" : ", ") + dirs[i].string();
    say(notice, names + " are on the same device (" + dev +
                    "): one drive for placement, its share of the reads split between them");
  }

  DriveWeights out;
  std::map<std::string, double> speed;  // per device
  if (order.size() < 2) {
    out.source = "equal";
  } else {
    std::optional<ProbeResult> saved = probe_file.empty() ? load_probe() : load_probe(probe_file);
    bool covered = saved.has_value();
    for (const auto& dev : order) {
      const ProbeDrive* pd = saved ? saved->drive_for(dirs[folders[dev][0]]) : nullptr;
      covered = covered && pd && pd->best_gbps > 0;
      if (covered) speed[dev] = pd->best_gbps;
    }
    if (covered) {
      out.source = "saved";
    } else {
      speed.clear();
      say(notice, std::string(saved ? "the saved probe does not cover every drive" : "no saved probe of the drives") +
                      ": measuring a short one (strata probe measures them properly)");
      ProbeOptions o;
      for (const auto& dev : order) o.paths.push_back(dirs[folders[dev][0]].string());
      o.file_bytes = kShortProbeFile;
      o.blocks = {4ull << 20};
      o.depths = {1, 8};
      o.seconds = 1.0;
      o.rounds = 1;
      try {
        const ProbeResult r = run_probe(o);
        for (const auto& dev : order) {
          const ProbeDrive* pd = r.drive_for(dirs[folders[dev][0]]);
          if (!pd || pd->best_gbps <= 0) throw Error(dirs[folders[dev][0]].string() + ": no read speed measured");
          speed[dev] = pd->best_gbps;
        }
        out.source = "measured";
      } catch (const Error& e) {
        speed.clear();
        say(notice, std::string("the short probe failed (") + e.what() + "): weighting the drives equally");
        out.source = "equal";
      }
    }
  }
  out.weights.assign(dirs.size(), 1.0);
  for (size_t d = 0; d < dirs.size(); ++d) {
    const double s = speed.count(device[d]) ? speed[device[d]] : 1.0;
    out.weights[d] = s / static_cast<double>(folders[device[d]].size());
  }
  return out;
}

}  // namespace strata
