#include "util/process_memory.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace strata {

namespace {

namespace fs = std::filesystem;

// "Key:   123 kB" lines (/proc files) -> bytes of `key`.
std::optional<uint64_t> kib_field(const char* file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    std::istringstream fields(line.substr(key.size()));
    uint64_t kib = 0;
    if (fields >> kib) return kib * 1024;
  }
  return std::nullopt;
}

// A file holding one number ("max" or missing: none).
std::optional<uint64_t> number_in(const fs::path& p) {
  std::ifstream in(p);
  std::string s;
  if (!(in >> s) || s == "max") return std::nullopt;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (end == s.c_str() || *end) return std::nullopt;
  return v;
}

// "key value" lines (memory.stat) -> value of `key`.
uint64_t stat_field(const fs::path& p, const std::string& key) {
  std::ifstream in(p);
  std::string k;
  uint64_t v = 0;
  while (in >> k >> v)
    if (k == key) return v;
  return 0;
}

// One cgroup directory's limit; nullopt without one.
std::optional<uint64_t> cgroup_limit(const fs::path& dir, bool v2) {
  const auto limit = number_in(dir / (v2 ? "memory.max" : "memory.limit_in_bytes"));
  // v1 says "no limit" with a number near 2^63.
  if (!limit || *limit >= (uint64_t{1} << 60)) return std::nullopt;
  return limit;
}

// What one cgroup directory leaves below its limit; nullopt without a limit.
// Its page cache counts as free: the kernel reclaims it before it refuses us.
std::optional<uint64_t> cgroup_room(const fs::path& dir, bool v2) {
  const auto limit = cgroup_limit(dir, v2);
  if (!limit) return std::nullopt;
  const uint64_t usage = number_in(dir / (v2 ? "memory.current" : "memory.usage_in_bytes")).value_or(0);
  const uint64_t cache = stat_field(dir / "memory.stat", v2 ? "file" : "total_cache");
  const uint64_t held = usage > cache ? usage - cache : 0;
  return *limit > held ? *limit - held : 0;
}

// Calls visit(dir, v2) for each memory cgroup directory of the process,
// from its own up to the root, with /proc and /sys read under `root`.
template <class Visit>
void for_each_memory_cgroup(const fs::path& root, Visit visit) {
  std::ifstream in(root / "proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    // "0::/path" (v2) or "N:memory:/path" (v1, possibly "N:memory,other:/path").
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const bool v2 = controllers.empty();
    if (!v2 && ("," + controllers + ",").find(",memory,") == std::string::npos) continue;
    const fs::path mount = root / (v2 ? "sys/fs/cgroup" : "sys/fs/cgroup/memory");
    fs::path rel = fs::path(line.substr(b + 1)).relative_path();
    // In a container the path may name the host's hierarchy, which is not
    // mounted here; the mounted root is then the container's own cgroup.
    while (true) {
      if (fs::exists(mount / rel)) visit(mount / rel, v2);
      if (rel.empty()) break;
      rel = rel.parent_path();
    }
  }
}

// The tightest room of the process's memory cgroups.
std::optional<uint64_t> cgroup_available() {
  std::optional<uint64_t> best;
  for_each_memory_cgroup("/", [&](const fs::path& dir, bool v2) {
    if (const auto room = cgroup_room(dir, v2)) best = best ? std::min(*best, *room) : *room;
  });
  return best;
}

}  // namespace

uint64_t resident_anonymous_bytes() { return kib_field("/proc/self/status", "RssAnon:").value_or(0); }

uint64_t resident_bytes() { return kib_field("/proc/self/status", "VmRSS:").value_or(0); }

uint64_t available_memory_bytes() {
  if (const char* fake = std::getenv("STRATA_MEMORY_AVAILABLE")) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(fake, &end, 10);
    if (end != fake && *end == '\0') return v;
  }
  uint64_t available = kib_field("/proc/meminfo", "MemAvailable:").value_or(UINT64_MAX);
  if (const auto room = cgroup_available()) available = std::min(available, *room);
  return available;
}

std::optional<uint64_t> memory_cgroup_limit_bytes(const std::filesystem::path& root) {
  std::optional<uint64_t> best;
  for_each_memory_cgroup(root, [&](const fs::path& dir, bool v2) {
    if (const auto limit = cgroup_limit(dir, v2)) best = best ? std::min(*best, *limit) : *limit;
  });
  return best;
}

}  // namespace strata
