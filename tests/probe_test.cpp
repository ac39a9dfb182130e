// strata probe: the drive measurement (storage/probe.h) on a folder and on
// existing files, its saved results, and the CLI's errors.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "storage/probe.h"
#include "storage_test_support.h"
#include "util/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using storage_test::make_file;
using storage_test::TempDir;

TEST(Probe, RunsOnASmallDirectoryAndRemovesItsFile) {
  TempDir dir;
  ProbeOptions o;
  o.paths = {dir.path().string()};
  o.file_bytes = 4ull << 20;
  o.blocks = {1ull << 20};
  o.depths = {1, 4};
  o.seconds = 0.06;
  o.rounds = 3;
  std::vector<std::string> lines;
  o.progress = [&](const std::string& l) { lines.push_back(l); };
  ProbeResult r = run_probe(o);
  EXPECT_TRUE(fs::is_empty(dir.path()));  // test file gone
  ASSERT_EQ(r.drives.size(), 1u);
  const ProbeDrive& d = r.drives[0];
  EXPECT_TRUE(d.created_file);
  EXPECT_EQ(d.file_bytes, 4ull << 20);
  ASSERT_EQ(d.results.size(), 2u);
  for (const auto& m : d.results) {
    EXPECT_GT(m.gbps, 0);
    // Three rounds, rated by their median.
    ASSERT_EQ(m.samples.size(), 3u);
    std::vector<double> s = m.samples;
    std::sort(s.begin(), s.end());
    EXPECT_DOUBLE_EQ(m.gbps, s[1]);
  }
  EXPECT_EQ(lines.size(), 1 + 2u * 3);  // the test file, then each point in each round
  EXPECT_GT(d.best_gbps, 0);
  EXPECT_EQ(d.best_block, 1ull << 20);
  EXPECT_EQ(r.combined.path, "all");
  EXPECT_EQ(r.drive_for(dir.path()), &r.drives[0]);
  EXPECT_FALSE(lines.empty());
  EXPECT_NE(format_probe_table(r).find("qd 4"), std::string::npos);

  // Round trip through the file that pack and demo read.
  fs::path out = dir.path() / "sub" / "probe.json";
  save_probe(r, out);
  auto back = load_probe(out);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->backend, r.backend);
  ASSERT_EQ(back->drives.size(), 1u);
  EXPECT_EQ(back->drives[0].device, d.device);
  EXPECT_DOUBLE_EQ(back->drives[0].best_gbps, d.best_gbps);
  EXPECT_EQ(back->drives[0].results.size(), 2u);
  EXPECT_EQ(back->drives[0].results[0].samples, d.results[0].samples);
  EXPECT_EQ(back->rounds, 3u);
  EXPECT_DOUBLE_EQ(back->drives[0].best_gbps_for(1ull << 20), d.best_gbps);
  EXPECT_EQ(back->drives[0].best_gbps_for(123), 0);
}

TEST(Probe, ReadsAnExistingFileAndTwoPathsTogether) {
  TempDir dir;
  fs::path f = make_file(dir.path(), "model.bin", 3 << 20, 9);
  ProbeOptions o;
  o.paths = {f.string(), f.string()};
  o.blocks = {1ull << 20};
  o.depths = {2};
  o.seconds = 0.03;
  ProbeResult r = run_probe(o);
  EXPECT_TRUE(fs::exists(f));  // never removes what it did not create
  ASSERT_EQ(r.drives.size(), 2u);
  EXPECT_FALSE(r.drives[0].created_file);
  ASSERT_EQ(r.combined.results.size(), 1u);
  EXPECT_GT(r.combined.results[0].gbps, 0);
}

TEST(Probe, ClearErrors) {
  TempDir dir;
  ProbeOptions o;
  o.seconds = 0.01;
  o.paths = {(dir.path() / "missing").string()};
  try {
    run_probe(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), (dir.path() / "missing").string() + ": No such file or directory");
  }
  o.paths = {dir.path().string()};
  o.file_bytes = 1ull << 60;  // no drive has an exabyte free
  try {
    run_probe(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(": not enough free space for a"), std::string::npos) << e.what();
  }
  fs::path small = make_file(dir.path(), "small.bin", 5000, 1);
  o.paths = {small.string()};
  EXPECT_THROW(run_probe(o), Error);
  o.paths = {"/dev/null"};
  try {
    run_probe(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a directory, regular file or block device"), std::string::npos);
  }
  EXPECT_EQ(fs::directory_iterator(dir.path()) == fs::directory_iterator(), false);  // only small.bin
  o.paths = {dir.path().string()};
  o.rounds = 0;
  try {
    run_probe(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--rounds must be between 1 and 100"), std::string::npos) << e.what();
  }
}

TEST(Probe, LoadMissingAndMalformed) {
  TempDir dir;
  EXPECT_FALSE(load_probe(dir.path() / "none.json").has_value());
  fs::path bad = dir.path() / "bad.json";
  std::ofstream(bad) << "{\"version\": 1, \"drives\": 3}";
  try {
    load_probe(bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(bad.string() + ": not a strata probe file", 0), 0u) << e.what();
  }
  std::ofstream(bad) << "not json";
  EXPECT_THROW(load_probe(bad), Error);
  setenv("STRATA_HOME", dir.path().c_str(), 1);
  EXPECT_EQ(default_probe_path(), dir.path() / "probe.json");
  unsetenv("STRATA_HOME");
}

TEST(Probe, CliMissingPathIsOneErrorLine) {
  const std::string out = (fs::temp_directory_path() / ("strata-probe-cli-" + std::to_string(getpid()))).string();
  const std::string cmd =
      std::string(STRATA_BINARY) + " probe /nonexistent/drive --seconds 0.01 >/dev/null 2>" + out;
  int status = std::system(cmd.c_str());
  std::ifstream f(out);
  std::stringstream ss;
  ss << f.rdbuf();
  fs::remove(out);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_EQ(ss.str(), "strata: error: /nonexistent/drive: No such file or directory\n");
}

// Settings that would only fail after measuring (or never end) are one line
// before anything is written or read.
TEST(Probe, CliRefusesSettingsItCouldNotFinish) {
  TempDir tmp;
  const std::string dir = tmp.path().string();
  const std::string err = (fs::temp_directory_path() / ("strata-probe-cli-err-" + std::to_string(getpid()))).string();
  const auto error_of = [&](const std::string& flags) {
    const int status = std::system((std::string(STRATA_BINARY) + " probe " + dir + " " + flags + " >/dev/null 2>" + err).c_str());
    std::ifstream f(err);
    std::stringstream ss;
    ss << f.rdbuf();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << flags;
    return ss.str();
  };
  EXPECT_NE(error_of("--out " + dir).find("--out"), std::string::npos);
  EXPECT_NE(error_of("--block 1000").find("4 GiB of buffers"), std::string::npos);
  EXPECT_NE(error_of("--seconds 1e30").find("--seconds"), std::string::npos);
  EXPECT_NE(error_of("--size inf").find("--size"), std::string::npos);
  fs::remove(err);
  EXPECT_TRUE(fs::is_empty(tmp.path())) << "no test file written";
}

}  // namespace
}  // namespace strata
