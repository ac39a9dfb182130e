#pragma once
// What this process holds in memory, and what the machine still has for it,
// as the kernel counts them.
#include <cstdint>
#include <filesystem>
#include <optional>

namespace strata {

// Resident anonymous memory (RssAnon in /proc/self/status): the heap, stacks
// and private buffers, not mapped files. 0 where the kernel does not say.
uint64_t resident_anonymous_bytes();
// All resident memory (VmRSS): the anonymous memory and the pages of mapped
// files, the program's code and its libraries among them (about 14 MB of
// strata's). 0 where the kernel does not say.
uint64_t resident_bytes();

// Memory this process may still take without pushing anything out: the
// smaller of the machine's MemAvailable (/proc/meminfo) and what each memory
// cgroup above the process leaves below its limit (v2 memory.max, v1
// memory.limit_in_bytes, minus the usage that is not page cache). UINT64_MAX
// where none of them can be read.
//
// Testing hook: STRATA_MEMORY_AVAILABLE=<bytes> replaces the measurement
// (tests pretend to run on a smaller machine with it).
uint64_t available_memory_bytes();

// The tightest memory limit of the cgroups above the process (v2
// memory.max, v1 memory.limit_in_bytes), with /proc and /sys read under
// `root` (tests give a fake tree); nullopt without a limit.
std::optional<uint64_t> memory_cgroup_limit_bytes(const std::filesystem::path& root = "/");

}  // namespace strata
