#pragma once
// What strata's own runs got from each drive: the rate their expert reads
// found while the drive was busy, a prompt's and a decode's apart, kept so
// that `strata budget` rates a drive by reads like the ones it predicts.
//
// Why not the probe alone: a probe keeps a steady queue of reads for a few
// seconds, while a decode's reads go out a layer at a time and drain (about
// 5 in flight on average where it may keep 16) and a prompt's come in bursts
// between layers' products. On the H100 machine's virtual drive the runs got
// 0.51-0.88x of a probe taken seconds before; over two calls the probe gave
// 1.75-3.44 GB/s where the runs' decode reads got 1.74-2.48 (docs/
// PERFORMANCE.md, "Session 41"; how budget does with the runs' rates:
// "Session 42: the drive as the runs found it").
//
// File ($STRATA_HOME/drive_rates.json), version 1:
// {
//   "version": 1,
//   "drives": [ { "device": "253:0", "name": "vda",
//                 "prefill": [ {"bytes": 1073741824, "busy_s": 0.52, "in_flight": 13.9,
//                               "when": "2026-12-07T10:00:00Z"}, ... ],
//                 "decode": [ ... ] } ]
// }
// Each list holds the latest kKeptRuns runs of that phase that read at least
// kLeastRunBytes from the drive, oldest first (fewer bytes time a handful of
// reads: their rate says more about latency than the drive). A drive's rate
// for a phase is the kept runs' bytes over their busy time: Σ bytes ÷
// Σ busy_s, so a run that read more counts more.
//
// Two runs that finish at once each write a file of their own and rename it
// over this one: the last rename wins, and the other's samples of that run
// are lost (never the file). A file with a drive listed twice is merged,
// and lists longer than kKeptRuns keep their latest.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace strata {

enum class ReadPhase { Prefill, Decode };

struct DriveRunSample {
  uint64_t bytes = 0;    // bytes the drive delivered in the phase
  double busy_s = 0;     // wall time with at least one of its reads in flight
  double in_flight = 0;  // reads in flight, averaged over that time
  std::string when;      // UTC, ISO 8601
};

struct DriveRateRecord {
  std::string device;  // "major:minor", as storage/probe.h's device_of spells it
  std::string name;    // "vda", "nvme0n1p2", ...
  std::vector<DriveRunSample> prefill, decode;

  const std::vector<DriveRunSample>& samples(ReadPhase phase) const { return phase == ReadPhase::Prefill ? prefill : decode; }
  std::vector<DriveRunSample>& samples(ReadPhase phase) { return phase == ReadPhase::Prefill ? prefill : decode; }
  // Σ bytes ÷ Σ busy_s of the kept runs of `phase`, in GB/s; 0 with none.
  double gbps(ReadPhase phase) const;
};

struct DriveRates {
  static constexpr size_t kKeptRuns = 8;
  static constexpr uint64_t kLeastRunBytes = 64ull << 20;

  std::vector<DriveRateRecord> drives;

  // The record of the drive holding `path` (by device_of), if any run read it.
  const DriveRateRecord* drive_for(const std::filesystem::path& path) const;
  // Adds one run's reads of a drive; a run of fewer than kLeastRunBytes, or
  // with no busy time, is left out (false). The oldest sample past
  // kKeptRuns goes.
  bool add(const std::string& device, const std::string& name, ReadPhase phase, const DriveRunSample& sample);
  // The record of `device`, a new one at the end where there is none.
  DriveRateRecord& record(const std::string& device);
};

// $STRATA_HOME/drive_rates.json (util/cache_dir.h).
std::filesystem::path default_drive_rates_path();

// nullopt when the file does not exist; strata::Error (one line naming the
// file) when it cannot be read or is not a version-1 drive rates file, or
// a sample is not a finite, non-negative figure.
std::optional<DriveRates> load_drive_rates(const std::filesystem::path& path);
// Written whole or not at all (storage/atomic_file.h); creates the folder.
void save_drive_rates(const DriveRates& rates, const std::filesystem::path& path);

}  // namespace strata
