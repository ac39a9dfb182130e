#pragma once
// Running the strata binary (STRATA_BINARY) as a user does, for the CLI tests.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "safetensors_writer.h"

namespace strata::clitest {

namespace fs = std::filesystem;

struct CommandResult {
  int exit_code = -1;  // -1: killed by a signal
  std::string out, err;
};

inline std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// `strata ARGS` through the shell, stdout and stderr to files (not a
// terminal); `env` is put before the command ("NAME=value ...").
inline CommandResult run_strata(const std::string& args, const std::string& env = "") {
  testfiles::TempDir tmp("strata-cli");
  const fs::path out = tmp.path() / "out", err = tmp.path() / "err";
  const std::string cmd = env + (env.empty() ? "" : " ") + std::string(STRATA_BINARY) + " " + args + " >" +
                          out.string() + " 2>" + err.string();
  int status = std::system(cmd.c_str());
  CommandResult r;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = read_all(out);
  r.err = read_all(err);
  return r;
}

// --ram for a run that streams under a budget without testing the budget's
// size: far above what the fixture models need, whatever the process holds
// itself before the model opens (under ASan that is tens of MB: its
// allocator keeps freed memory in quarantine, and it counts as resident).
inline const std::string kAmpleRam = "--ram 2";

inline fs::path fixture(const std::string& name) { return fs::path(STRATA_FIXTURES_DIR) / "models" / name; }

// One line on stderr, naming the problem; exit code 1.
inline void expect_clean_error(const CommandResult& r, const std::string& phrase) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("strata: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(phrase), std::string::npos) << "expected '" << phrase << "' in: " << r.err;
}

}  // namespace strata::clitest
