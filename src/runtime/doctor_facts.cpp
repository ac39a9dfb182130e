// The gathering half of runtime/doctor.h: reads the machine, judges nothing.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>

#include "kernels/dispatch.h"
#include "runtime/doctor.h"
#include "runtime/loader.h"
#include "storage/aligned_buffer.h"
#include "storage/io_uring_storage.h"
#include "storage/probe.h"
#include "util/process_memory.h"

namespace strata {

namespace {

namespace fs = std::filesystem;

// A file's first word ("" when it cannot be read).
std::string first_word(const fs::path& p) {
  std::ifstream in(p);
  std::string s;
  in >> s;
  return s;
}

int number_or(const fs::path& p, int fallback) {
  const std::string s = first_word(p);
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  return s.empty() || *end ? fallback : static_cast<int>(v);
}

// The bracketed choice of a sysfs setting ("always [madvise] never").
std::string selected(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  const size_t a = line.find('['), b = line.find(']');
  return a == std::string::npos || b == std::string::npos || b < a ? "" : line.substr(a + 1, b - a - 1);
}

std::string fs_type_name(const fs::path& p) {
  struct statfs s {};
  if (::statfs(p.c_str(), &s) != 0) return "";
  // The filesystems strata's drives are likely on, by their magic (linux/magic.h).
  static const std::map<unsigned long, std::string> names = {
      {0xEF53, "ext4"},      {0x58465342, "xfs"},     {0x9123683E, "btrfs"},   {0x01021994, "tmpfs"},
      {0x794C7630, "overlay"}, {0x6969, "nfs"},       {0x65735546, "fuse"},    {0x2FC12FC1, "zfs"},
      {0xF2F52010, "f2fs"},  {0x5346544E, "ntfs"},    {0x4D44, "vfat"},        {0xFF534D42, "cifs"},
      {0x858458F6, "ramfs"}, {0x73717368, "squashfs"}};
  const auto it = names.find(static_cast<unsigned long>(s.f_type));
  return it == names.end() ? "" : it->second;
}

// Writes a block with O_DIRECT into a folder and reads it back (a file: reads
// its first block); says why not in d.direct_error, and whether it was the
// filesystem refusing O_DIRECT (EINVAL) rather than the test itself failing
// (a folder that cannot be written, a file that cannot be read).
void try_direct(const fs::path& p, DriveFacts& d) {
  std::error_code ec;
  AlignedBuffer block(kIoAlign, true);
  auto failed = [&](const char* what, int err) {
    d.direct_error = std::string(what) + ": " + std::strerror(err);
    d.direct_refused = err == EINVAL;
  };
  if (fs::is_directory(p, ec)) {
    static std::atomic<unsigned> serial{0};
    const fs::path file = p / (".strata-doctor-" + std::to_string(::getpid()) + "-" + std::to_string(++serial) + "-" +
                               std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0600);
    if (fd < 0) return failed("cannot create a test file with O_DIRECT", errno);
    if (::pwrite(fd, block.data(), kIoAlign, 0) != static_cast<ssize_t>(kIoAlign))
      failed("an O_DIRECT write failed", errno);
    else if (::pread(fd, block.data(), kIoAlign, 0) != static_cast<ssize_t>(kIoAlign))
      failed("an O_DIRECT read failed", errno);
    ::close(fd);
    ::unlink(file.c_str());
    return;
  }
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  if (fd < 0) return failed("cannot open with O_DIRECT", errno);
  if (::pread(fd, block.data(), kIoAlign, 0) < 0) failed("an O_DIRECT read failed", errno);
  ::close(fd);
}

// The block device's sysfs folder for a "major:minor": a partition's disk,
// whose queue the partition shares. Empty for tmpfs, overlay and the like.
fs::path block_folder(const fs::path& root, const std::string& device) {
  std::error_code ec;
  fs::path dir = fs::canonical(root / "sys/dev/block" / device, ec);
  if (ec) return {};
  if (fs::exists(dir / "partition")) dir = dir.parent_path();
  return fs::exists(dir / "queue") ? dir : fs::path();
}

DriveFacts drive_facts(const fs::path& path, const fs::path& root, bool io) {
  DriveFacts d;
  d.path = path;
  d.device = device_of(path);
  if (d.device.empty()) return d;
  d.fs_type = fs_type_name(path);
  struct statvfs v {};
  if (::statvfs(path.c_str(), &v) == 0) d.free_bytes = static_cast<uint64_t>(v.f_bavail) * v.f_frsize;
  if (!io) return d;
  try_direct(path, d);
  const fs::path dir = block_folder(root, d.device);
  if (dir.empty()) return d;
  d.block = dir.filename().string();
  std::error_code ec;
  std::ifstream model(dir / "device/model");
  std::getline(model, d.model);
  while (!d.model.empty() && d.model.back() == ' ') d.model.pop_back();
  d.driver = fs::read_symlink(dir / "device/driver", ec).filename().string();
  d.rotational = number_or(dir / "queue/rotational", -1);
  d.nr_requests = number_or(dir / "queue/nr_requests", -1);
  d.read_ahead_kb = number_or(dir / "queue/read_ahead_kb", -1);
  d.scheduler = selected(dir / "queue/scheduler");
  return d;
}

// CapEff's bit 14 (CAP_IPC_LOCK) in /proc/self/status.
bool has_ipc_lock(const fs::path& root) {
  std::ifstream in(root / "proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("CapEff:", 0) == 0) return (std::strtoull(line.c_str() + 7, nullptr, 16) >> 14) & 1;
  return false;
}

}  // namespace

MachineFacts gather_machine_facts(const DoctorOptions& o) {
  MachineFacts f;
  if (!IoUringStorage::available(&f.io_uring_error) && f.io_uring_error.empty()) f.io_uring_error = "unknown error";
  f.io_uring_disabled = number_or(o.root / "proc/sys/kernel/io_uring_disabled", -1);
  struct rlimit r {};
  if (::getrlimit(RLIMIT_MEMLOCK, &r) == 0 && r.rlim_cur != RLIM_INFINITY) f.memlock_bytes = r.rlim_cur;
  f.cap_ipc_lock = has_ipc_lock(o.root);
  f.thp_enabled = selected(o.root / "sys/kernel/mm/transparent_hugepage/enabled");
  {
    std::ifstream cpuinfo(o.root / "proc/cpuinfo");
    for (std::string line; std::getline(cpuinfo, line);)
      if (line.rfind("flags", 0) == 0) {
        f.virtual_machine = (line + " ").find(" hypervisor ") != std::string::npos;
        break;
      }
  }
  f.cgroup_limit = memory_cgroup_limit_bytes(o.root);
  const uint64_t available = available_memory_bytes();
  if (available != UINT64_MAX) f.derived_ram = budget_from_available(process_resident_bytes(), available);
  f.isa = kernels::isa_name(kernels::active_isa());
  for (kernels::Isa i : {kernels::Isa::Avx512, kernels::Isa::Avx2, kernels::Isa::Scalar})
    if (kernels::isa_supported(i)) {
      f.best_isa = kernels::isa_name(i);
      break;
    }
  for (const fs::path& p : o.drives) f.drives.push_back(drive_facts(p, o.root, true));
  // The cache dir may not exist yet: its nearest existing folder's drive.
  fs::path cache = o.cache_dir;
  std::error_code ec;
  while (cache.has_relative_path() && !fs::exists(cache, ec)) cache = cache.parent_path();
  f.cache = drive_facts(cache, o.root, false);
  f.cache.path = o.cache_dir;
  return f;
}

}  // namespace strata
