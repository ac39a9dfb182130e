#pragma once
// `strata probe`: how fast each drive (and all of them at once) delivers
// expert-sized O_DIRECT reads at several queue depths. The result is saved as
// JSON so `pack` (where to put blobs) and `demo` (what to expect) can read it.
//
// File format (version 1):
// {
//   "version": 1, "created": "2026-01-01T00:00:00Z", "backend": "io_uring",
//   "seconds_per_point": 2.0, "rounds": 3,
//   "drives": [ { "path": "/mnt/a", "device": "259:1", "name": "nvme0n1p1",
//                 "file_bytes": 2147483648, "created_file": true, "direct": true,
//                 "best_gbps": 3.1, "best_block": 16777216, "best_depth": 16,
//                 "results": [ {"block": 16777216, "depth": 1, "gbps": 1.2,
//                               "samples": [1.1, 1.2, 1.3]}, ... ] } ],
//   "combined": { same fields; "path": "all", "device": "" }
// }
// GB/s is 10^9 bytes per second. A point's "gbps" is the median of its
// "samples" (one per round; files of older probes may have none).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace strata {

struct ProbeMeasurement {
  uint64_t block = 0;   // bytes per read
  unsigned depth = 0;   // reads in flight per drive
  double gbps = 0;      // the median of the samples
  std::vector<double> samples;  // GB/s of each round, in round order
};

struct ProbeDrive {
  std::string path;     // as given (a directory or a file); "all" for the combined run
  std::string device;   // "major:minor" of the drive, "" for the combined run
  std::string name;     // "vda", "nvme0n1p2", ...
  uint64_t file_bytes = 0;
  bool created_file = false;  // probe wrote a test file there (and removed it)
  bool direct = true;         // reads were O_DIRECT
  std::vector<ProbeMeasurement> results;
  double best_gbps = 0;
  uint64_t best_block = 0;
  unsigned best_depth = 0;

  // The best rate at exactly this read size, or 0 when it was not measured.
  double best_gbps_for(uint64_t block) const;
};

struct ProbeResult {
  int version = 1;
  std::string created;  // UTC, ISO 8601
  std::string backend;  // storage backend used
  double seconds_per_point = 0;  // split over the rounds
  unsigned rounds = 1;           // samples per point (files of older probes: 1)
  std::vector<ProbeDrive> drives;
  ProbeDrive combined;  // every path read at once; a copy of drives[0] when there is one path

  // The entry for the drive holding `path` (matched by device_of), if probed.
  const ProbeDrive* drive_for(const std::filesystem::path& path) const;
};

// The drive `path` is on, as ProbeDrive::device spells it ("major:minor" of
// its st_dev; of the device itself for a block device); "" when it cannot
// be stat()ed.
std::string device_of(const std::filesystem::path& path);
// The same spelling of a st_dev number.
std::string device_string(uint64_t st_dev);

struct ProbeOptions {
  std::vector<std::string> paths;   // directories (a test file is written there) or existing files
  uint64_t file_bytes = 2ull << 30; // test file size
  std::vector<uint64_t> blocks = {16ull << 20, 4ull << 20};
  std::vector<unsigned> depths = {1, 4, 8, 16, 32};
  double seconds = 2.0;             // per (block, depth) point, split over the rounds
  // Each point is measured this many times, the rounds going over all points
  // in turn, and rated by the median: a shared or virtual drive varies from
  // second to second, and the best of single samples would overstate the
  // ceiling that later reads are compared against.
  unsigned rounds = 3;
  std::string backend;              // as StorageOptions::backend
  std::function<void(const std::string&)> progress;  // one line per step, optional
};

// Runs the probe; throws strata::Error (one line) for a missing path, a path
// that is neither a directory nor a file/block device, no space for the test
// file, or a read error. Test files are removed on every exit path (also on
// SIGINT/SIGTERM).
ProbeResult run_probe(const ProbeOptions& options);

// $STRATA_HOME/probe.json, else ~/.cache/strata/probe.json.
std::filesystem::path default_probe_path();

std::string probe_to_json(const ProbeResult& result);  // pretty-printed
void save_probe(const ProbeResult& result, const std::filesystem::path& path);  // creates parent dirs
// nullopt when the file does not exist; strata::Error when it exists but is
// not a probe file this version understands.
std::optional<ProbeResult> load_probe(const std::filesystem::path& path);
std::optional<ProbeResult> load_probe();  // from default_probe_path()

std::string format_probe_table(const ProbeResult& result);

}  // namespace strata
