// strata doctor (runtime/doctor.h): every failing case provoked, by facts
// for the judgement, by a fake /proc and /sys tree for the gathering, and on
// this machine for real where a test can change it (a lowered memlock limit
// without CAP_IPC_LOCK, kernels forced to scalar code, two folders on one
// device, a missing folder).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "kernels/dispatch.h"
#include "runtime/doctor.h"
#include "storage/probe.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using clitest::CommandResult;
using clitest::fixture;
using clitest::run_strata;

constexpr uint64_t GiB = 1ull << 30;

DriveFacts good_drive(const std::string& path, const std::string& device, const std::string& block) {
  DriveFacts d;
  d.path = path;
  d.device = device;
  d.fs_type = "ext4";
  d.free_bytes = 500 * GiB;
  d.block = block;
  d.model = "Samsung SSD 990 PRO 2TB";
  d.rotational = 0;
  d.nr_requests = 1023;
  d.read_ahead_kb = 128;
  d.scheduler = "none";
  return d;
}

MachineFacts healthy() {
  MachineFacts f;
  f.io_uring_disabled = 0;
  f.memlock_bytes = 64 * GiB;
  f.thp_enabled = "madvise";
  f.cgroup_limit = 100 * GiB;
  f.derived_ram = 90 * GiB;
  f.isa = f.best_isa = "avx512";
  f.drives = {good_drive("/mnt/a", "259:1", "nvme0n1"), good_drive("/mnt/b", "259:5", "nvme1n1")};
  f.cache = good_drive("/home/u/.cache/strata", "259:2", "");
  return f;
}

DoctorOptions options() {
  DoctorOptions o;
  o.drives = {"/mnt/a", "/mnt/b"};
  o.ram_bytes = 64 * GiB;
  o.registered_bytes = 40 * GiB;
  return o;
}

std::vector<const DoctorLine*> failing(const std::vector<DoctorLine>& lines) {
  std::vector<const DoctorLine*> out;
  for (const DoctorLine& l : lines)
    if (l.verdict == DoctorVerdict::Fail) out.push_back(&l);
  return out;
}

TEST(Doctor, AHealthyMachinePassesEveryCheck) {
  const std::vector<DoctorLine> lines = diagnose(healthy(), options());
  EXPECT_TRUE(failing(lines).empty()) << format_doctor_line(*failing(lines)[0]);
  std::vector<std::string> checks;
  for (const DoctorLine& l : lines) checks.push_back(l.check);
  for (const char* c : {"io_uring", "memlock", "huge pages", "cgroup memory", "CPU", "O_DIRECT /mnt/a",
                        "O_DIRECT /mnt/b", "drive nvme0n1", "drive nvme1n1", "read-ahead nvme0n1", "free space /mnt/a",
                        "free space /home/u/.cache/strata"})
    EXPECT_NE(std::find(checks.begin(), checks.end(), c), checks.end()) << c;
}

struct Case {
  const char* name;
  std::function<void(MachineFacts&, DoctorOptions&)> provoke;
  const char* check;       // the one failing check
  const char* fix_phrase;  // in its fix
};

TEST(Doctor, EachFailingCaseIsOneFailingLineWithItsFix) {
  const std::vector<Case> cases = {
      {"io_uring disabled by sysctl",
       [](MachineFacts& f, DoctorOptions&) {
         f.io_uring_error = "Operation not permitted";
         f.io_uring_disabled = 2;
       },
       "io_uring", "kernel.io_uring_disabled=0"},
      {"io_uring blocked by seccomp",
       [](MachineFacts& f, DoctorOptions&) { f.io_uring_error = "Operation not permitted"; }, "io_uring", "seccomp"},
      {"memlock below the expert cache",
       [](MachineFacts& f, DoctorOptions&) { f.memlock_bytes = 8ull << 20; }, "memlock", "ulimit -l unlimited"},
      {"transparent huge pages off", [](MachineFacts& f, DoctorOptions&) { f.thp_enabled = "never"; }, "huge pages",
       "transparent_hugepage"},
      {"--ram above the cgroup's limit", [](MachineFacts& f, DoctorOptions&) { f.cgroup_limit = 32 * GiB; },
       "cgroup memory", "--ram below 32.0 GiB"},
      {"no AVX2", [](MachineFacts& f, DoctorOptions&) { f.isa = f.best_isa = "scalar"; }, "CPU", "AVX2"},
      {"kernels forced below the CPU's best", [](MachineFacts& f, DoctorOptions&) { f.isa = "avx2"; }, "CPU",
       "STRATA_KERNELS"},
      {"O_DIRECT refused",
       [](MachineFacts& f, DoctorOptions&) {
         f.drives[1].direct_error = "an O_DIRECT read failed: Invalid argument";
         f.drives[1].direct_refused = true;
       },
       "O_DIRECT /mnt/b", "filesystem with O_DIRECT"},
      {"O_DIRECT not tried: a folder that cannot be written",
       [](MachineFacts& f, DoctorOptions&) {
         f.drives[1].direct_error = "cannot create a test file with O_DIRECT: Permission denied";
       },
       "O_DIRECT /mnt/b", "may write"},
      {"two partitions of one disk",
       [](MachineFacts& f, DoctorOptions&) { f.drives[1] = good_drive("/mnt/b", "259:2", "nvme0n1"); },
       "one device /mnt/b", "one folder per drive"},
      {"a drive folder that is not there",
       [](MachineFacts& f, DoctorOptions&) {
         f.drives[1] = DriveFacts{};
         f.drives[1].path = "/mnt/b";
       },
       "O_DIRECT /mnt/b", "exists"},
      {"a drive folder in memory",
       [](MachineFacts& f, DoctorOptions&) {
         f.drives[1].block.clear();
         f.drives[1].fs_type = "tmpfs";
       },
       "drive /mnt/b", "on a drive"},
      {"a spinning disk",
       [](MachineFacts& f, DoctorOptions&) {
         f.drives[0].rotational = 1;
         f.drives[0].driver = "sd";
       },
       "drive nvme0n1", "SSD"},
      {"a queue shorter than the reads in flight",
       [](MachineFacts& f, DoctorOptions&) { f.drives[0].nr_requests = 4; }, "drive nvme0n1", "nr_requests"},
      {"read-ahead too small", [](MachineFacts& f, DoctorOptions&) { f.drives[1].read_ahead_kb = 16; },
       "read-ahead nvme1n1", "read_ahead_kb"},
      {"two folders on one device",
       [](MachineFacts& f, DoctorOptions&) { f.drives[1] = good_drive("/mnt/b", "259:1", "nvme0n1"); },
       "one device /mnt/b", "one folder per drive"},
      {"a drive nearly full", [](MachineFacts& f, DoctorOptions&) { f.drives[0].free_bytes = 100ull << 20; },
       "free space /mnt/a", "free at least"},
      {"the cache dir nearly full", [](MachineFacts& f, DoctorOptions&) { f.cache.free_bytes = 0; },
       "free space /home/u/.cache/strata", "free at least"},
      {"no room for a pack", [](MachineFacts&, DoctorOptions& o) { o.pack_bytes = 1200 * GiB; }, "room for a pack",
       "add a drive"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    MachineFacts f = healthy();
    DoctorOptions o = options();
    c.provoke(f, o);
    const std::vector<DoctorLine> lines = diagnose(f, o);
    const auto bad = failing(lines);
    ASSERT_EQ(bad.size(), 1u) << (bad.empty() ? "" : format_doctor_line(*bad[0]) + " / " + format_doctor_line(*bad.back()));
    EXPECT_EQ(bad[0]->check, c.check);
    EXPECT_NE(bad[0]->fix.find(c.fix_phrase), std::string::npos) << bad[0]->fix;
    const std::string line = format_doctor_line(*bad[0]);
    EXPECT_EQ(line.rfind("FAIL  " + std::string(c.check), 0), 0u) << line;
    EXPECT_EQ(line.find('\n'), std::string::npos);
  }
}

// What does not apply is said, not failed: a kernel without THP, a network
// filesystem without a queue to read.
// A virtual machine's disk reports itself rotational by default: not judged
// by that flag.
TEST(Doctor, AVirtualDisksRotationalFlagIsNotASpinningDisk) {
  MachineFacts f = healthy();
  f.drives[0].rotational = 1;
  f.drives[0].model.clear();
  f.drives[0].driver = "virtio_blk";
  std::vector<DoctorLine> lines = diagnose(f, options());
  EXPECT_TRUE(failing(lines).empty()) << format_doctor_line(*failing(lines)[0]);
  // A virtual SCSI disk (driver sd) on a machine whose CPU says it runs under a hypervisor.
  f.drives[0].driver = "sd";
  f.virtual_machine = true;
  lines = diagnose(f, options());
  EXPECT_TRUE(failing(lines).empty()) << format_doctor_line(*failing(lines)[0]);
}

// Memlock against the expert cache: skipped when there is nothing to compare
// with, ok when the model runs in RAM (nothing is registered).
TEST(Doctor, MemlockIsJudgedAgainstWhatIsRegistered) {
  MachineFacts f = healthy();
  f.memlock_bytes = 8ull << 20;
  DoctorOptions o = options();
  auto memlock = [&] {
    for (const DoctorLine& l : diagnose(f, o))
      if (l.check == "memlock") return l;
    return DoctorLine{};
  };
  o.registered_bytes.reset();
  EXPECT_EQ(memlock().verdict, DoctorVerdict::Skip);
  o.registered_bytes = 0;
  EXPECT_EQ(memlock().verdict, DoctorVerdict::Ok);
  EXPECT_NE(memlock().finding.find("runs in RAM"), std::string::npos);
  o.registered_bytes = 4ull << 20;
  EXPECT_EQ(memlock().verdict, DoctorVerdict::Ok);
  o.registered_bytes = 9ull << 20;
  EXPECT_EQ(memlock().verdict, DoctorVerdict::Fail);
}

// A long check name (a model file's path) is kept whole.
TEST(Doctor, ALongCheckNameIsNotCut) {
  const std::string path = "/models/" + std::string(120, 'x') + "/model.safetensors";
  const std::string line = format_doctor_line({"O_DIRECT " + path, DoctorVerdict::Ok, "reads bypass the page cache", ""});
  EXPECT_NE(line.find(path + " reads bypass"), std::string::npos) << line;
}

TEST(Doctor, WhatDoesNotApplyIsSkipped) {
  MachineFacts f = healthy();
  f.thp_enabled.clear();
  f.drives[1].block.clear();
  f.drives[1].fs_type = "nfs";
  const std::vector<DoctorLine> lines = diagnose(f, options());
  EXPECT_TRUE(failing(lines).empty());
  int skipped = 0;
  for (const DoctorLine& l : lines) skipped += l.verdict == DoctorVerdict::Skip;
  EXPECT_EQ(skipped, 2);
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

std::string device_of_folder(const fs::path& p) {
  struct stat st;
  EXPECT_EQ(::stat(p.c_str(), &st), 0);
  return std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
}

// The gathering reads /proc and /sys under the root it is given: a fake
// tree of a machine with every setting wrong gives every matching failure.
TEST(DoctorFacts, ProcAndSysAreReadUnderTheRootAndJudged) {
  testfiles::TempDir root("strata-doctor-root"), drive("strata-doctor-drive");
  const fs::path r = root.path();
  write(r / "proc/sys/kernel/io_uring_disabled", "2\n");
  write(r / "proc/self/status", "Name:\tstrata\nCapEff:\t0000000000000000\n");
  write(r / "sys/kernel/mm/transparent_hugepage/enabled", "always madvise [never]\n");
  write(r / "proc/self/cgroup", "0::/box/inner\n");
  write(r / "sys/fs/cgroup/box/memory.max", "4294967296\n");
  write(r / "sys/fs/cgroup/box/inner/memory.max", "max\n");
  // The drive folder's device is a partition of a fake spinning disk.
  const fs::path disk = r / "sys/devices/virtual/block/fakedisk";
  write(disk / "fakedisk1/partition", "1\n");
  write(disk / "queue/rotational", "1\n");
  write(disk / "queue/nr_requests", "4\n");
  write(disk / "queue/read_ahead_kb", "16\n");
  write(disk / "queue/scheduler", "none [mq-deadline] kyber\n");
  write(disk / "device/model", "FakeDisk 9000   \n");
  fs::create_directory_symlink("../../../../../bus/scsi/drivers/sd", disk / "device/driver");  // as sysfs spells it
  fs::create_directories(r / "sys/dev/block");
  fs::create_directory_symlink("../../devices/virtual/block/fakedisk/fakedisk1",
                               r / "sys/dev/block" / device_of_folder(drive.path()));

  DoctorOptions o;
  o.root = r;
  o.drives = {drive.path()};
  o.cache_dir = drive.path() / "not-yet" / "cache";  // created later: its nearest folder's drive
  o.ram_bytes = 8 * GiB;
  const MachineFacts f = gather_machine_facts(o);
  EXPECT_EQ(f.io_uring_disabled, 2);
  EXPECT_EQ(f.thp_enabled, "never");
  ASSERT_TRUE(f.cgroup_limit.has_value());
  EXPECT_EQ(*f.cgroup_limit, 4 * GiB);
  ASSERT_EQ(f.drives.size(), 1u);
  EXPECT_EQ(f.drives[0].block, "fakedisk");
  EXPECT_EQ(f.drives[0].model, "FakeDisk 9000");
  EXPECT_EQ(f.drives[0].driver, "sd");
  EXPECT_EQ(f.drives[0].rotational, 1);
  EXPECT_EQ(f.drives[0].nr_requests, 4);
  EXPECT_EQ(f.drives[0].read_ahead_kb, 16);
  EXPECT_EQ(f.drives[0].scheduler, "mq-deadline");
  EXPECT_GT(f.drives[0].free_bytes, 0u);
  EXPECT_EQ(f.cache.device, f.drives[0].device);
  EXPECT_EQ(f.cache.path, o.cache_dir);

  std::vector<std::string> failed;
  for (const DoctorLine& l : diagnose(f, o))
    if (l.verdict == DoctorVerdict::Fail) failed.push_back(l.check);
  for (const char* c : {"huge pages", "cgroup memory", "drive fakedisk"})
    EXPECT_NE(std::find(failed.begin(), failed.end(), c), failed.end()) << c;
}

// cgroup v1: memory.limit_in_bytes, "no limit" spelled as a number near 2^63.
TEST(DoctorFacts, CgroupV1LimitsAreRead) {
  testfiles::TempDir root("strata-doctor-v1");
  const fs::path r = root.path();
  write(r / "proc/self/cgroup", "4:memory:/job\n1:cpu:/\n");
  write(r / "sys/fs/cgroup/memory/job/memory.limit_in_bytes", "2147483648\n");
  write(r / "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  DoctorOptions o;
  o.root = r;
  o.cache_dir = r;
  const MachineFacts f = gather_machine_facts(o);
  ASSERT_TRUE(f.cgroup_limit.has_value());
  EXPECT_EQ(*f.cgroup_limit, 2 * GiB);
}

nlohmann::json check_named(const nlohmann::json& lines, const std::string& name) {
  for (const auto& l : lines)
    if (l["check"] == name) return l;
  ADD_FAILURE() << "no check " << name << " in " << lines.dump();
  return {};
}

// On this machine: two folders on one device and a missing folder fail for
// real, with exit code 1; the folder itself takes O_DIRECT (the tests run on
// a drive, as strata's packs do).
TEST(CliDoctor, TwoFoldersOnOneDeviceAndAMissingOneFailForReal) {
  testfiles::TempDir tmp("strata-doctor-cli");
  fs::create_directory(tmp / "b");
  const CommandResult r = run_strata("doctor --json --drive " + tmp.path().string() + " --drive " + (tmp / "b").string() +
                                         " --drive " + (tmp / "missing").string(),
                                     "STRATA_HOME=" + tmp.path().string());
  ASSERT_EQ(r.exit_code, 1) << r.err << r.out;
  const nlohmann::json lines = nlohmann::json::parse(r.out);
  EXPECT_EQ(check_named(lines, "one device " + (tmp / "b").string())["verdict"], "fail");
  EXPECT_EQ(check_named(lines, "O_DIRECT " + (tmp / "missing").string())["verdict"], "fail");
  EXPECT_EQ(check_named(lines, "O_DIRECT " + tmp.path().string())["verdict"], "ok");
  EXPECT_EQ(check_named(lines, "CPU")["verdict"], "ok");
  EXPECT_TRUE(fs::is_empty(tmp / "b")) << "the O_DIRECT test block is removed";
}

// Kernels forced below what the CPU runs: the CPU check fails and names the
// variable (on a CPU without AVX2 there is nothing lower to force).
TEST(CliDoctor, KernelsForcedToScalarCodeFail) {
  if (!kernels::isa_supported(kernels::Isa::Avx2)) GTEST_SKIP() << "this CPU runs scalar kernels only";
  testfiles::TempDir tmp("strata-doctor-isa");
  const CommandResult r = run_strata("doctor --json --drive " + tmp.path().string(),
                                     "STRATA_KERNELS=scalar STRATA_HOME=" + tmp.path().string());
  ASSERT_EQ(r.exit_code, 1) << r.err;
  const nlohmann::json cpu = check_named(nlohmann::json::parse(r.out), "CPU");
  EXPECT_EQ(cpu["verdict"], "fail");
  EXPECT_NE(cpu["fix"].get<std::string>().find("STRATA_KERNELS"), std::string::npos);
}

// A memlock limit below the expert cache, in a process without
// CAP_IPC_LOCK (root gives it up with setpriv), fails; the same limit with
// a budget small enough passes.
TEST(CliDoctor, AMemlockLimitBelowTheExpertCacheFails) {
  if (std::system("command -v prlimit >/dev/null && command -v setpriv >/dev/null") != 0)
    GTEST_SKIP() << "util-linux's prlimit and setpriv are needed to lower the limit";
  testfiles::TempDir tmp("strata-doctor-memlock");
  const std::string drop = ::getuid() == 0 ? "setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock " : "";
  const std::string run = "env STRATA_HOME=" + tmp.path().string() + " " + drop + "prlimit --memlock=1048576 ";
  const std::string args = " doctor --json --drive " + tmp.path().string() + " --ram ";
  for (const char* ram : {"2", "0.0005"}) {
    SCOPED_TRACE(ram);
    const std::string cmd = run + STRATA_BINARY + args + ram + " >" + (tmp / "out").string() + " 2>&1";
    const int status = std::system(cmd.c_str());
    const nlohmann::json memlock = check_named(nlohmann::json::parse(clitest::read_all(tmp / "out")), "memlock");
    EXPECT_EQ(memlock["verdict"], std::string(ram) == "2" ? "fail" : "ok") << memlock.dump();
    if (std::string(ram) == "2") {
      EXPECT_NE(WEXITSTATUS(status), 0);
    }
  }
}

// With a model: its expert file is the drive checked (read, not written);
// its expert cache (well under any memlock limit here) is what memlock is
// judged against; a checkpoint packed onto given drives needs room there.
TEST(CliDoctor, AModelsFilesCacheAndPackRoomAreChecked) {
  testfiles::TempDir tmp("strata-doctor-model");
  const fs::path model = fixture("ds_mtp");
  CommandResult r = run_strata("doctor " + model.string() + " --ram 1 --json", "STRATA_HOME=" + tmp.path().string());
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.err;
  nlohmann::json lines = nlohmann::json::parse(r.out);
  EXPECT_EQ(check_named(lines, "O_DIRECT " + (model / "model.safetensors").string())["verdict"], "ok");
  EXPECT_EQ(check_named(lines, "memlock")["verdict"], "ok");
  for (const auto& l : lines) EXPECT_NE(l["check"], "room for a pack") << "packing is optional without --drive";
  r = run_strata("doctor " + model.string() + " --ram 1 --json --drive " + tmp.path().string(),
                 "STRATA_HOME=" + tmp.path().string());
  lines = nlohmann::json::parse(r.out);
  EXPECT_EQ(check_named(lines, "room for a pack")["verdict"], "ok");
  EXPECT_EQ(check_named(lines, "O_DIRECT " + tmp.path().string())["verdict"], "ok");
}

TEST(CliDoctor, BadArgumentsAreCleanErrors) {
  clitest::expect_clean_error(run_strata("doctor --ram -1"), "--ram");
  clitest::expect_clean_error(run_strata("doctor --io-depth 0"), "--io-depth");
  clitest::expect_clean_error(run_strata("doctor /nonexistent/model"), "/nonexistent/model");
}

}  // namespace
}  // namespace strata
