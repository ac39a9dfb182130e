#pragma once
// `strata doctor`: what decides strata's speed and correctness on this
// machine, one line per check, each failing one with its fix.
//
//   gather_machine_facts(options)   reads the machine: creates an io_uring,
//                                   writes and reads a block with O_DIRECT in
//                                   each drive folder, reads /proc and /sys
//                                   (under options.root), rlimits, statvfs,
//                                   the kernels' instruction set
//   diagnose(facts, options)        judges them: no I/O at all
//
// The two halves are apart so that every failing case can be provoked in a
// test: a fake /proc and /sys tree under `root` for the gathering, facts
// for the judgement (a disabled io_uring, a spinning disk).
//
// What a check decides, and why it matters to strata:
//   io_uring        expert reads go through it; without it a pread pool reads
//                   (slower at the depths strata keeps in flight)
//   O_DIRECT        expert reads bypass the page cache; without it the cache
//                   fills with experts outside --ram's accounting
//   memlock         the expert cache is registered with io_uring as fixed
//                   buffers, which count against RLIMIT_MEMLOCK (not for a
//                   process with CAP_IPC_LOCK); refused, each read pins its
//                   pages itself
//   huge pages      read buffers ask for transparent huge pages: a 16 MiB
//                   read into 4 KiB pages pins 4096 of them
//   read-ahead      the trunk is read through the page cache at load
//   cgroup memory   a --ram above the cgroup's limit gets the process killed
//   drive           a spinning disk, or a queue shorter than strata's reads
//                   in flight
//   one device      two drive folders on one device share its rate
//   CPU             the kernels' instruction set (AVX-512, AVX2, scalar)
//   free space      where probes, heat, sessions and packs are written
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace strata {

struct DoctorOptions {
  // Folders (or files) on the drives experts are read from.
  std::vector<std::filesystem::path> drives;
  // --ram: the process's budget; unset = what the loader would derive.
  std::optional<uint64_t> ram_bytes;
  // Bytes of expert cache strata would register as io_uring fixed buffers
  // (the budget less what is resident; 0: the model runs in RAM); unset:
  // not known (no model and no --ram).
  std::optional<uint64_t> registered_bytes;
  // Bytes the drives together must still take (a model's experts to pack
  // there); 0 = nothing beyond the smallest room below.
  uint64_t pack_bytes = 0;
  // strata's cache dir (probe, heat, sessions).
  std::filesystem::path cache_dir;
  // Where /proc and /sys are read from ("/" on a real machine).
  std::filesystem::path root = "/";
  // Reads strata keeps in flight per drive (--io-depth).
  unsigned io_depth = 16;
};

struct DriveFacts {
  std::filesystem::path path;  // as given
  std::string device;          // "major:minor" of its filesystem, "" when it cannot be stat()ed
  std::string fs_type;         // "ext4", "tmpfs", ... ("" unknown)
  std::string direct_error;    // "" = an O_DIRECT write and read of a block worked there
  bool direct_refused = false;  // with direct_error: the filesystem refused O_DIRECT (else: the test could not be made)
  uint64_t free_bytes = 0;     // for an unprivileged user
  // The block device under it ("" for tmpfs, overlay, network filesystems):
  std::string block;           // "nvme0n1" (the whole disk, for a partition)
  std::string model;           // its device/model, "" unknown
  std::string driver;          // its device/driver ("nvme", "virtio_blk", "sd"), "" unknown
  int rotational = -1;         // queue/rotational; -1 unknown
  int nr_requests = -1;        // queue/nr_requests
  int read_ahead_kb = -1;      // queue/read_ahead_kb
  std::string scheduler;       // queue/scheduler's selected one
};

struct MachineFacts {
  std::string io_uring_error;  // "" = a ring could be created
  int io_uring_disabled = -1;  // sysctl kernel.io_uring_disabled; -1 absent
  std::optional<uint64_t> memlock_bytes;  // RLIMIT_MEMLOCK's soft limit; unset = unlimited
  bool cap_ipc_lock = false;   // the process may lock memory beyond it
  std::string thp_enabled;     // "always", "madvise", "never"; "" absent
  bool virtual_machine = false;  // the CPU says it runs under a hypervisor (its disks' rotational flag is the host's guess)
  std::optional<uint64_t> cgroup_limit;  // the tightest memory cgroup limit above the process
  uint64_t derived_ram = 0;    // the budget the loader derives without --ram
  std::string isa;             // the kernels in use
  std::string best_isa;        // the best this build and CPU support
  std::vector<DriveFacts> drives;
  DriveFacts cache;            // the cache dir (O_DIRECT and queue not looked at)
};

MachineFacts gather_machine_facts(const DoctorOptions& options);

enum class DoctorVerdict { Ok, Fail, Skip };  // Skip: does not apply here

struct DoctorLine {
  std::string check;    // "io_uring", "O_DIRECT /mnt/a", ...
  DoctorVerdict verdict = DoctorVerdict::Ok;
  std::string finding;  // what was found, one sentence
  std::string fix;      // for a failing check: what to do
};

std::vector<DoctorLine> diagnose(const MachineFacts& facts, const DoctorOptions& options);

// "ok    check   finding", "FAIL  check   finding; fix: ..." (one line each).
std::string format_doctor_line(const DoctorLine& line);

}  // namespace strata
