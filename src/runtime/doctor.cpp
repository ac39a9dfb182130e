// The judging half of runtime/doctor.h: facts in, lines out, no I/O.
#include "runtime/doctor.h"

#include <cstdio>
#include <map>

namespace strata {

namespace {

namespace fs = std::filesystem;

std::string bytes_text(uint64_t b) {
  char s[32];
  const double v = static_cast<double>(b);
  if (b >= (1ull << 30))
    std::snprintf(s, sizeof s, "%.1f GiB", v / (1ull << 30));
  else
    std::snprintf(s, sizeof s, "%.1f MiB", v / (1ull << 20));
  return s;
}

DoctorLine ok(std::string check, std::string finding) {
  return {std::move(check), DoctorVerdict::Ok, std::move(finding), ""};
}
DoctorLine fail(std::string check, std::string finding, std::string fix) {
  return {std::move(check), DoctorVerdict::Fail, std::move(finding), std::move(fix)};
}
DoctorLine skip(std::string check, std::string finding) {
  return {std::move(check), DoctorVerdict::Skip, std::move(finding), ""};
}

DoctorLine io_uring_line(const MachineFacts& f) {
  if (f.io_uring_error.empty()) return ok("io_uring", "a ring can be created: expert reads use it");
  std::string finding = "cannot create a ring (" + f.io_uring_error + ")";
  if (f.io_uring_disabled > 0) finding += ", kernel.io_uring_disabled = " + std::to_string(f.io_uring_disabled);
  finding += ": experts are read by a pread thread pool, slower at strata's depths";
  return fail("io_uring", finding,
              f.io_uring_disabled > 0 ? "sysctl -w kernel.io_uring_disabled=0"
                                      : "allow io_uring_setup/io_uring_enter (a container's seccomp profile blocks "
                                        "them: docker run --security-opt seccomp=unconfined, or a profile with them)");
}

DoctorLine memlock_line(const MachineFacts& f, const DoctorOptions& o) {
  if (f.cap_ipc_lock) return ok("memlock", "CAP_IPC_LOCK: expert buffers are registered without a limit");
  if (!f.memlock_bytes) return ok("memlock", "unlimited: expert buffers are registered as io_uring fixed buffers");
  if (!o.registered_bytes)
    return skip("memlock", bytes_text(*f.memlock_bytes) + " may be locked; give a model or --ram to compare it with "
                                                          "the expert cache");
  const uint64_t need = *o.registered_bytes;
  if (need == 0)
    return ok("memlock", bytes_text(*f.memlock_bytes) + " may be locked; the model runs in RAM, nothing to register");
  if (*f.memlock_bytes >= need)
    return ok("memlock", bytes_text(*f.memlock_bytes) + " may be locked, the expert cache needs " + bytes_text(need));
  return fail("memlock",
              bytes_text(*f.memlock_bytes) + " may be locked, the expert cache needs " + bytes_text(need) +
                  ": io_uring refuses its fixed buffers and every read pins its pages",
              "ulimit -l unlimited (systemd: LimitMEMLOCK=infinity; docker: --ulimit memlock=-1; "
              "/etc/security/limits.conf: memlock unlimited)");
}

DoctorLine huge_pages_line(const MachineFacts& f) {
  if (f.thp_enabled.empty()) return skip("huge pages", "transparent huge pages are not offered by this kernel");
  if (f.thp_enabled != "never")
    return ok("huge pages", "transparent huge pages: " + f.thp_enabled + " (read buffers ask for them)");
  return fail("huge pages",
              "transparent huge pages are off: each O_DIRECT read pins its buffer's 4 KiB pages one by one",
              "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled");
}

DoctorLine cgroup_line(const MachineFacts& f, const DoctorOptions& o) {
  if (!f.cgroup_limit) return ok("cgroup memory", "no memory limit above the process");
  const std::string limit = bytes_text(*f.cgroup_limit);
  if (o.ram_bytes && *o.ram_bytes > *f.cgroup_limit)
    return fail("cgroup memory",
                "--ram " + bytes_text(*o.ram_bytes) + " is above the cgroup's limit of " + limit +
                    ": the kernel would kill strata before the budget is reached",
                "give --ram below " + limit + ", or raise the limit (memory.max)");
  if (o.ram_bytes) return ok("cgroup memory", "limit " + limit + "; --ram " + bytes_text(*o.ram_bytes) + " is below it");
  return ok("cgroup memory", "limit " + limit + "; the budget strata derives (" + bytes_text(f.derived_ram) +
                                 ") keeps below it");
}

DoctorLine cpu_line(const MachineFacts& f) {
  if (f.isa != f.best_isa)
    return fail("CPU", "the kernels run " + f.isa + " code, the CPU has " + f.best_isa,
                "unset STRATA_KERNELS (it forces " + f.isa + ")");
  if (f.isa == "scalar")
    return fail("CPU", "no AVX2: the kernels run scalar code, several times slower",
                "a CPU with AVX2 (x86-64-v3) or AVX-512");
  return ok("CPU", "the kernels run " + f.isa + " code, the best this CPU has");
}

DoctorLine direct_line(const DriveFacts& d) {
  const std::string check = "O_DIRECT " + d.path.string();
  if (d.device.empty()) return fail(check, "cannot be read", "give a folder (or file) that exists on a drive");
  const std::string on = d.fs_type.empty() ? "" : " (" + d.fs_type + ")";
  if (!d.direct_error.empty() && !d.direct_refused)
    return fail(check, d.direct_error + on + ": O_DIRECT could not be tried here",
                "give a folder strata may write on that drive, or a model file on it");
  if (!d.direct_error.empty())
    return fail(check, d.direct_error + on + ": experts would be read through the page cache, outside --ram",
                "put the experts on a filesystem with O_DIRECT (ext4, xfs, btrfs)");
  return ok(check, "reads bypass the page cache" + on);
}

// The device's queue and kind, once per device.
DoctorLine drive_line(const DriveFacts& d, const DoctorOptions& o, bool virtual_machine) {
  if (d.block.empty()) {
    const std::string check = "drive " + d.path.string();
    if (d.fs_type == "tmpfs" || d.fs_type == "ramfs")
      return fail(check, "in memory (" + d.fs_type + "), not a drive: experts there take RAM outside --ram",
                  "give a folder on a drive");
    return skip(check, "no block device under it" + (d.fs_type.empty() ? std::string() : " (" + d.fs_type + ")") +
                           ": its queue is not known");
  }
  const std::string check = "drive " + d.block;
  const std::string name = !d.model.empty() ? d.model : d.driver;
  const std::string what = (name.empty() ? "" : name + ", ") + "queue " +
                           (d.nr_requests >= 0 ? std::to_string(d.nr_requests) : std::string("unknown")) +
                           (d.scheduler.empty() ? "" : ", scheduler " + d.scheduler);
  // A virtual machine's disk (virtio, Xen, or a virtual SCSI disk) says
  // "rotational" by default whatever the host stores it on: the flag tells
  // nothing there.
  const bool virtual_disk =
      virtual_machine || d.driver == "virtio_blk" || d.driver == "vbd" || d.driver == "xen_blkfront";
  if (d.rotational == 1 && !virtual_disk)
    return fail(check, what + ": a spinning disk, each expert read waits for a seek", "put the experts on an SSD");
  if (d.nr_requests >= 0 && static_cast<unsigned>(d.nr_requests) < o.io_depth)
    return fail(check,
                what + ": the queue holds fewer requests than strata's " + std::to_string(o.io_depth) +
                    " reads in flight",
                "echo 64 > /sys/block/" + d.block + "/queue/nr_requests (or --io-depth " +
                    std::to_string(d.nr_requests) + ")");
  return ok(check, what);
}

DoctorLine read_ahead_line(const DriveFacts& d) {
  const std::string check = "read-ahead " + d.block;
  if (d.read_ahead_kb < 0) return skip(check, "not known");
  if (d.read_ahead_kb < 128)
    return fail(check, std::to_string(d.read_ahead_kb) + " KiB: the trunk loads through the page cache in small reads",
                "echo 128 > /sys/block/" + d.block + "/queue/read_ahead_kb");
  return ok(check, std::to_string(d.read_ahead_kb) + " KiB (the trunk's load reads ahead)");
}

// Probe test files, heat, sessions and the probe itself need room; so does a
// pack, spread over the drives.
constexpr uint64_t kLeastRoom = 1ull << 30;

DoctorLine free_line(const DriveFacts& d, const char* what) {
  const std::string check = "free space " + d.path.string();
  if (d.device.empty()) return skip(check, "cannot be read");
  if (d.free_bytes < kLeastRoom)
    return fail(check, bytes_text(d.free_bytes) + " free: too little for " + std::string(what),
                "free at least " + bytes_text(kLeastRoom) + " there");
  return ok(check, bytes_text(d.free_bytes) + " free");
}

}  // namespace

std::vector<DoctorLine> diagnose(const MachineFacts& f, const DoctorOptions& o) {
  std::vector<DoctorLine> lines = {io_uring_line(f), memlock_line(f, o), huge_pages_line(f), cgroup_line(f, o),
                                   cpu_line(f)};
  for (const DriveFacts& d : f.drives) lines.push_back(direct_line(d));
  std::map<std::string, const DriveFacts*> devices;  // first folder of each device
  std::map<std::string, const DriveFacts*> disks;    // first folder of each disk
  for (const DriveFacts& d : f.drives) {
    if (d.device.empty()) continue;
    const auto [first, fresh] = devices.emplace(d.device, &d);
    if (!fresh) {
      lines.push_back(fail("one device " + d.path.string(),
                           "on the same device (" + d.device + ") as " + first->second->path.string() +
                               ": the two share one drive's rate",
                           "give one folder per drive"));
      continue;
    }
    if (!d.block.empty()) {
      const auto [disk, new_disk] = disks.emplace(d.block, &d);
      if (!new_disk) {  // another partition of a disk already listed
        lines.push_back(fail("one device " + d.path.string(),
                             "on another partition of the disk " + d.block + " as " + disk->second->path.string() +
                                 ": the two share one drive's rate",
                             "give one folder per drive"));
        continue;
      }
    }
    lines.push_back(drive_line(d, o, f.virtual_machine));
    if (!d.block.empty()) lines.push_back(read_ahead_line(d));
  }
  for (const auto& [device, d] : devices) lines.push_back(free_line(*d, "a probe's test file"));
  lines.push_back(free_line(f.cache, "probes, heat and sessions"));
  if (o.pack_bytes > 0) {
    uint64_t room = 0;
    for (const auto& [device, d] : devices) room += d->free_bytes;
    const std::string finding = bytes_text(room) + " free on the drives, the experts need " + bytes_text(o.pack_bytes);
    lines.push_back(room >= o.pack_bytes
                        ? ok("room for a pack", finding)
                        : fail("room for a pack", finding, "free room or add a drive (strata pack --drive DIR ...)"));
  }
  return lines;
}

std::string format_doctor_line(const DoctorLine& l) {
  const char* tag = l.verdict == DoctorVerdict::Ok ? "ok  " : l.verdict == DoctorVerdict::Fail ? "FAIL" : "--  ";
  std::string s = std::string(tag) + "  " + l.check;
  s += std::string(s.size() < 28 ? 28 - s.size() : 1, ' ') + l.finding;
  if (!l.fix.empty()) s += "; fix: " + l.fix;
  return s;
}

}  // namespace strata
