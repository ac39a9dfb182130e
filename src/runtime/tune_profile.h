#pragma once
// What `strata tune` measured best on this machine, kept as a profile that
// later runs (generate, serve, bench) apply where the user set nothing:
// threads, reads in flight per drive, the read piece size, prefetch, and
// the widest prefill step.
//
// A profile is kept per machine, in strata's cache dir:
//   <cache dir>/tune/<machine key>.json
// the key naming the host, its CPU and its memory, so a cache dir shared by
// several machines (a home folder on NFS) gives each its own. A profile
// applies to the machine it was made on and no other: one whose "machine"
// is not this one's key is refused. `--profile none` ignores it.
//
// File format (version 1):
// { "version": 1, "machine": "host-cpu-16c-125g", "created": "2026-12-04T18:00:00Z",
//   "threads": 16, "io_depth": 8, "piece_bytes": 1048576, "prefetch": "on",
//   "max_batch": 256,
//   "measured": { ...what was measured, for the record... } }
// A field left out, 0 or "" was not tuned (the default applies).
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "runtime/loader.h"

namespace strata {

struct TuneProfile {
  std::string machine;      // machine_key() of where it was measured
  std::string created;      // UTC, ISO 8601
  int threads = 0;
  unsigned io_depth = 0;
  uint64_t piece_bytes = 0;
  std::string prefetch;     // "on", "off"; "" = not tuned
  int64_t max_batch = 0;
  nlohmann::json measured = nlohmann::json::object();
};

// This machine: hostname, CPU model, cores and memory, as one file-name-safe word.
std::string machine_key();
std::filesystem::path default_profile_path();  // <cache dir>/tune/<machine_key()>.json

void save_profile(const TuneProfile& profile, const std::filesystem::path& path);
// nullopt when the file does not exist; strata::Error naming it when it is
// not a profile this version reads, holds values out of range, or was made
// on another machine (`machine` = the key it must carry).
std::optional<TuneProfile> load_profile(const std::filesystem::path& path, const std::string& machine);

// Applies `profile` to what the user left unset in `options` (threads 0, no
// io_depth, the default piece size, prefetch auto, no max_batch), and names
// it in options.profile. The tuned widest step is a cap: a budget that
// allows less keeps its own.
void apply_profile(const TuneProfile& profile, const std::filesystem::path& path, LoadOptions& options);

// One line: "threads 16, io depth 8, pieces 1 MiB, prefetch on, prefill rows 256".
std::string describe_profile(const TuneProfile& profile);

}  // namespace strata
