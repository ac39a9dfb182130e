// `strata pack` killed with SIGKILL at random moments, in each of its phases
// (writing the trunk, writing experts, writing the manifest), then run again:
// the pack it finishes is byte for byte the pack an uninterrupted run
// writes, and in every state in between, opening it is one clear error and
// nothing runs (pack/packer.h, storage/pack_dir.h).
//
// The moments: each kill waits for its phase to begin (seen through inotify:
// trunk.partial created, an expert file opened, manifest.json.tmp created)
// and then a random delay, drawn (seeded) within that phase's length as an
// uninterrupted run measured it. Runs resume from whatever the last kill
// left, so later kills land in resumed runs too.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <vector>
#include <thread>

#include "cli_support.h"
#include "pack_test_support.h"
#include "safetensors_writer.h"

extern char** environ;

namespace strata {
namespace {

namespace fs = std::filesystem;
using namespace clitest;
using namespace packtest;
using Clock = std::chrono::steady_clock;

enum class Phase { Trunk, Experts, Manifest };
constexpr const char* kPhaseNames[] = {"trunk", "experts", "manifest"};

// What starts a phase, and what ends it, as the pack directory sees it.
bool starts(Phase p, uint32_t mask, const std::string& name) {
  switch (p) {
    case Phase::Trunk: return (mask & IN_CREATE) && name == "trunk.partial";
    case Phase::Experts: return (mask & IN_OPEN) && name.starts_with("strata-experts-");
    case Phase::Manifest: return (mask & IN_CREATE) && name == "manifest.json.tmp";
  }
  return false;
}

bool ends(Phase p, uint32_t mask, const std::string& name) {
  switch (p) {
    case Phase::Trunk: return (mask & IN_MOVED_TO) && name == "trunk";
    case Phase::Experts: return starts(Phase::Manifest, mask, name);
    case Phase::Manifest: return (mask & IN_MOVED_TO) && name == "manifest.json";
  }
  return false;
}

// `strata pack SRC --out OUT`, watched: events of OUT as they come.
class PackRun {
 public:
  // stderr goes to `log` (its notices: a resume that had to start over says so).
  PackRun(const fs::path& src, const fs::path& out, const fs::path& log) {
    fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    EXPECT_GE(fd_, 0);
    EXPECT_GE(inotify_add_watch(fd_, out.c_str(), IN_CREATE | IN_OPEN | IN_MOVED_TO), 0);
    const std::string bin = STRATA_BINARY, s = src.string(), o = out.string();
    const char* argv[] = {bin.c_str(), "pack", s.c_str(), "--out", o.c_str(), nullptr};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    EXPECT_EQ(posix_spawn(&pid_, bin.c_str(), &fa, nullptr, const_cast<char**>(argv), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
  }
  ~PackRun() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      wait();
    }
    ::close(fd_);
  }

  // Waits for an event `want` accepts; false when the run ended first.
  template <class F>
  bool wait_for(F&& want) {
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      ::poll(&p, 1, 5);
      const size_t before = seen_.size();
      const bool any = read_events();
      for (size_t i = before; i < seen_.size(); ++i)
        if (want(seen_[i].first, seen_[i].second)) return true;
      if (!any && exited()) return false;
    }
  }
  // Every event of the run, once it has ended.
  const std::vector<std::pair<uint32_t, std::string>>& events() {
    while (read_events()) {
    }
    return seen_;
  }
  // SIGKILL; true when it was still running.
  bool kill() {
    if (exited()) return false;
    ::kill(pid_, SIGKILL);  // pid_ > 0 here: never kill(-1, ...)
    wait();
    return true;
  }
  int wait() {
    int status = 0;
    if (pid_ > 0) {
      ::waitpid(pid_, &status, 0);
      pid_ = -1;
      status_ = status;
    }
    return status_;
  }

 private:
  bool exited() {
    if (pid_ <= 0) return true;
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || r < 0) {
      pid_ = -1;
      status_ = status;
      return true;
    }
    return false;
  }

  bool read_events() {
    alignas(inotify_event) char buf[8192];
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    for (ssize_t i = 0; i < n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(buf + i);
      seen_.emplace_back(e->mask, std::string(e->len ? e->name : ""));
      i += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
    }
    return n > 0;
  }

  int fd_ = -1;
  pid_t pid_ = -1;
  std::vector<std::pair<uint32_t, std::string>> seen_;
  int status_ = 0;
};

// The phase a killed run was in: the last one it began, by its events
// ("complete" once the manifest is in place, "not started" before any).
std::string phase_killed_in(PackRun& run, const fs::path& out) {
  if (fs::exists(out / "manifest.json")) return "complete";
  if (!fs::exists(out / "pack.progress.json")) return "not started";
  std::string phase = "start";
  for (const auto& [mask, name] : run.events())
    for (Phase p : {Phase::Trunk, Phase::Experts, Phase::Manifest})
      if (starts(p, mask, name)) phase = kPhaseNames[static_cast<int>(p)];
  return phase;
}

TEST(PackKill, KilledAtRandomMomentsResumesToTheSameBytesAndNeverOpensHalfWritten) {
  testfiles::TempDir tmp("strata-kill");
  const fs::path src = synth_model(tmp.path() / "src", 9, synth::Format::Safetensors, 0.03);

  // The uninterrupted pack, and how long each phase took in it.
  const fs::path ref = tmp.path() / "ref";
  fs::create_directories(ref);
  std::map<Phase, double> length;
  {
    PackRun run(src, ref, tmp.path() / "log");
    std::map<Phase, Clock::time_point> began;
    ASSERT_TRUE(run.wait_for([&](uint32_t m, const std::string& n) {
      for (Phase p : {Phase::Trunk, Phase::Experts, Phase::Manifest}) {
        if (starts(p, m, n) && !began.count(p)) began[p] = Clock::now();
        if (ends(p, m, n) && began.count(p) && !length.count(p))
          length[p] = std::chrono::duration<double>(Clock::now() - began[p]).count();
      }
      return length.size() == 3;
    }));
    const int status = run.wait();
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::printf("[   info   ] phases of an uninterrupted pack: trunk %.3f s, experts %.3f s, manifest %.4f s\n",
              length[Phase::Trunk], length[Phase::Experts], length[Phase::Manifest]);

  const fs::path out = tmp.path() / "killed";
  fs::create_directories(out);
  std::mt19937_64 rng(20261202);
  std::map<std::string, int> landed;  // phase killed in -> kills
  int kills = 0;
  const Phase order[] = {Phase::Trunk, Phase::Experts, Phase::Manifest};
  // 24 kills aimed at random moments of each phase, and more until 16 have
  // landed (a kill that comes after the pack finished lands nowhere): on a
  // loaded machine the phases run longer or shorter than the uninterrupted
  // pack measured above, so the attempts it takes vary; at most 60.
  for (int k = 0; k < 60 && (k < 24 || kills < 16); ++k) {
    const Phase p = order[k % 3];
    const double delay = std::uniform_real_distribution<double>(0, length[p])(rng);
    const fs::path log = tmp.path() / ("log" + std::to_string(k));
    PackRun run(src, out, log);
    // A resumed run may skip the trunk (it is there already): kill it in
    // the next phase it reaches.
    const bool seen = run.wait_for([&](uint32_t m, const std::string& n) {
      return starts(p, m, n) || (p == Phase::Trunk && starts(Phase::Experts, m, n));
    });
    if (seen) std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    const bool killed = run.kill();
    const std::string state = phase_killed_in(run, out);
    SCOPED_TRACE("kill " + std::to_string(k) + " aimed at " + kPhaseNames[static_cast<int>(p)] + ", left: " + state);
    if (killed) ++kills;
    // A run after a kill resumes; it never has to start over.
    EXPECT_EQ(read_all(log).find("starting over"), std::string::npos) << read_all(log);
    ++landed[killed ? state : "finished before the kill"];
    const CommandResult g = run_strata("generate " + out.string() + " --prompt-ids 1,2,3 -n 1 --threads 1");
    if (state == "complete") {
      EXPECT_EQ(g.exit_code, 0) << g.err;
      // Killed after its manifest, maybe before its progress record went:
      // packing again finds it packed and tidies that up.
      const CommandResult again = run_strata("pack " + src.string() + " --out " + out.string() + " -q");
      EXPECT_EQ(again.exit_code, 0) << again.err;
      EXPECT_EQ(difference(ref, out), "");
      // Start the next round from nothing, so kills keep landing in every
      // phase.
      fs::remove_all(out);
      fs::create_directories(out);
    } else if (state == "not started") {
      expect_clean_error(g, "not a model directory or pack");
    } else {
      expect_clean_error(g, out.string() + ": incomplete pack (pack was interrupted); run strata pack again to resume");
    }
  }
  // Whatever the last kill left, finished.
  const CommandResult last = run_strata("pack " + src.string() + " --out " + out.string() + " -q");
  ASSERT_EQ(last.exit_code, 0) << last.err;
  EXPECT_EQ(difference(ref, out), "");

  std::string summary;
  for (const auto& [state, n] : landed) summary += " " + state + ": " + std::to_string(n) + ";";
  std::printf("[   info   ] %d kills survived; left in:%s\n", kills, summary.c_str());
  // At least one kill inside each long phase (how many depends on the
  // machine's load: once under load only one of ~20 landed in the trunk).
  EXPECT_GE(landed["trunk"], 1) << summary;
  EXPECT_GE(landed["experts"], 1) << summary;
  EXPECT_GE(kills, 16) << summary;
}

}  // namespace
}  // namespace strata
