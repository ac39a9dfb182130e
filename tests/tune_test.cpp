// strata tune (runtime/tune.h, runtime/tune_profile.h): the profile's round
// trip through its file, what applying it changes and what it leaves to the
// user's flags, the loader's use of a tuned step cap, and the command end to
// end (measure, save, and later runs report the profile they applied).
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "runtime/loader.h"
#include "runtime/tune_profile.h"
#include "util/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using clitest::CommandResult;
using clitest::expect_clean_error;
using clitest::fixture;
using clitest::run_strata;

TuneProfile sample() {
  TuneProfile p;
  p.machine = machine_key();
  p.created = "2026-12-04T18:00:00Z";
  p.threads = 3;
  p.io_depth = 8;
  p.piece_bytes = 512u << 10;
  p.prefetch = "off";
  p.max_batch = 64;
  p.measured = {{"threads", nlohmann::json::array({{{"threads", 3}, {"one_row_s", 0.01}}})}};
  return p;
}

TEST(TuneProfile, SavedAndLoadedAsItWas) {
  testfiles::TempDir tmp("strata-tune-profile");
  const fs::path path = tmp / "sub" / "p.json";
  save_profile(sample(), path);
  const std::optional<TuneProfile> got = load_profile(path, machine_key());
  ASSERT_TRUE(got.has_value());
  const TuneProfile want = sample();
  EXPECT_EQ(got->machine, want.machine);
  EXPECT_EQ(got->created, want.created);
  EXPECT_EQ(got->threads, want.threads);
  EXPECT_EQ(got->io_depth, want.io_depth);
  EXPECT_EQ(got->piece_bytes, want.piece_bytes);
  EXPECT_EQ(got->prefetch, want.prefetch);
  EXPECT_EQ(got->max_batch, want.max_batch);
  EXPECT_EQ(got->measured, want.measured);
  EXPECT_FALSE(load_profile(tmp / "absent.json", machine_key()).has_value());
}

// The key names this machine in a file name: lower-case letters, digits,
// dots and single dashes.
TEST(TuneProfile, TheMachineKeyIsAFileName) {
  const std::string key = machine_key();
  EXPECT_TRUE(std::regex_match(key, std::regex("[a-z0-9.]+(-[a-z0-9.]+)*"))) << key;
  EXPECT_EQ(default_profile_path().filename(), key + ".json");
  EXPECT_EQ(default_profile_path().parent_path().filename(), "tune");
}

TEST(TuneProfile, AnotherMachinesOrABadProfileIsAClearError) {
  testfiles::TempDir tmp("strata-tune-bad");
  const fs::path path = tmp / "p.json";
  TuneProfile other = sample();
  other.machine = "elsewhere-cpu-64c-512g";
  save_profile(other, path);
  EXPECT_THROW(
      {
        try {
          load_profile(path, machine_key());
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("another machine (elsewhere-cpu-64c-512g"), std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"[1]", "not a JSON object"},
      {R"({"version": 2, "machine": "m"})", "version"},
      {R"({"version": 1})", "wrong type"},
      {R"({"version": 1, "machine": "m", "threads": "many"})", "threads is not a whole number"},
      {R"({"version": 1, "machine": "m", "threads": 1.5})", "threads is not a whole number"},
      {R"({"version": 1, "machine": "m", "io_depth": 3.7})", "io_depth is not a whole number"},
      {R"({"version": 1, "machine": "m", "piece_bytes": 1e20})", "piece_bytes is not a whole number"},
      {R"({"version": 1, "machine": "m", "piece_bytes": 18446744073709555712})", "piece_bytes"},
      {R"({"version": 1, "machine": "m", "threads": 5000})", "threads out of range"},
      {R"({"version": 1, "machine": "m", "threads": -1})", "threads"},
      {R"({"version": 1, "machine": "m", "piece_bytes": 1000})", "piece_bytes"},
      {R"({"version": 1, "machine": "m", "prefetch": "maybe"})", "prefetch"},
      {R"({"version": 1, "machine": "m", "max_batch": 100000})", "max_batch"},
      {"{", "p.json"},
  };
  for (const auto& [text, phrase] : bad) {
    std::ofstream(path) << text;
    try {
      load_profile(path, "m");
      ADD_FAILURE() << "accepted " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << text << ": " << e.what();
    }
  }
}

// Applied where the user set nothing; what the user set stays.
TEST(TuneProfile, AppliedOnlyWhereNoFlagWasGiven) {
  const TuneProfile p = sample();
  LoadOptions unset;
  apply_profile(p, "/x/p.json", unset);
  EXPECT_EQ(unset.threads, 3);
  EXPECT_EQ(unset.io_depth, 8u);
  EXPECT_EQ(unset.piece_bytes, 512u << 10);
  EXPECT_EQ(unset.prefetch, LoadOptions::Prefetch::Off);
  EXPECT_EQ(unset.max_batch, 0);  // a cap, not a forced step
  EXPECT_EQ(unset.max_batch_cap, 64);
  EXPECT_EQ(unset.profile, "/x/p.json");

  LoadOptions given;
  given.threads = 1;
  given.io_depth = 2;
  given.piece_bytes = 4096;
  given.prefetch = LoadOptions::Prefetch::On;
  given.max_batch = 16;
  apply_profile(p, "/x/p.json", given);
  EXPECT_EQ(given.threads, 1);
  EXPECT_EQ(given.io_depth, 2u);
  EXPECT_EQ(given.piece_bytes, 4096u);
  EXPECT_EQ(given.prefetch, LoadOptions::Prefetch::On);
  EXPECT_EQ(given.max_batch, 16);
  EXPECT_EQ(given.max_batch_cap, 0);
}

// A tuned step cap narrows the step a budget allows, never widens it.
TEST(TuneProfile, TheStepCapNarrowsTheBudgetsStep) {
  LoadOptions o;
  o.ram_bytes = 1ull << 30;
  const int64_t budget_step = load_model(fixture("ds_mtp"), o)->max_batch_rows();
  ASSERT_GT(budget_step, 32);
  o.max_batch_cap = 32;
  EXPECT_EQ(load_model(fixture("ds_mtp"), o)->max_batch_rows(), 32);
  o.max_batch_cap = 4096;
  EXPECT_EQ(load_model(fixture("ds_mtp"), o)->max_batch_rows(), budget_step);
  LoadOptions in_ram;
  in_ram.max_batch_cap = 48;
  EXPECT_EQ(load_model(fixture("ds_mtp"), in_ram)->max_batch_rows(), 48);
}

// The command end to end on a fixture: it measures, saves this machine's
// profile in the cache dir, and a later generate applies it and says so in
// its stats; --profile none ignores it.
TEST(CliTune, MeasuresSavesAndLaterRunsReportTheProfile) {
  testfiles::TempDir tmp("strata-tune-cli");
  const std::string env = "STRATA_BUDGET_COMPUTE_MIB=4 STRATA_HOME=" + tmp.path().string();
  fs::create_directory(tmp / "drive");
  const CommandResult r = run_strata("tune " + fixture("ds_mtp").string() + " --drive " + (tmp / "drive").string() +
                                         " --seconds 0.02 --test-file-mib 16 --json",
                                     env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path saved = tmp / "tune" / (machine_key() + ".json");
  ASSERT_TRUE(fs::exists(saved));
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j, nlohmann::json::parse(clitest::read_all(saved)));
  EXPECT_GE(j["threads"].get<int>(), 1);
  const unsigned depth = j["io_depth"];
  EXPECT_TRUE(depth == 4 || depth == 8 || depth == 16 || depth == 32) << depth;
  EXPECT_EQ(j["piece_bytes"].get<uint64_t>() % 4096, 0u);
  EXPECT_GE(j["piece_bytes"].get<uint64_t>(), 256u << 10);
  const std::string prefetch = j["prefetch"];
  EXPECT_TRUE(prefetch.empty() || prefetch == "on" || prefetch == "off");
  EXPECT_EQ(j["measured"]["prefetch"].size(), 4u);  // decode and a prompt, each on and off
  EXPECT_GE(j["max_batch"].get<int64_t>(), 32);
  EXPECT_FALSE(j["measured"]["threads"].empty());
  EXPECT_FALSE(j["measured"]["drives"]["results"].empty());
  EXPECT_TRUE(fs::is_empty(tmp / "drive")) << "the probe's test file is removed";

  const std::string gen = "generate " + fixture("ds_mtp").string() + " --prompt-ids 1,2,3 -n 2 --json";
  const CommandResult used = run_strata(gen, env);
  ASSERT_EQ(used.exit_code, 0) << used.err;
  EXPECT_EQ(nlohmann::json::parse(used.out)["stats"]["profile"], saved.string());
  EXPECT_NE(used.err.find("tuned profile " + saved.string()), std::string::npos) << used.err;
  const CommandResult ignored = run_strata(gen + " --profile none", env);
  ASSERT_EQ(ignored.exit_code, 0) << ignored.err;
  EXPECT_TRUE(nlohmann::json::parse(ignored.out)["stats"]["profile"].is_null());
  // The same tokens whatever was tuned.
  EXPECT_EQ(nlohmann::json::parse(used.out)["tokens"], nlohmann::json::parse(ignored.out)["tokens"]);
}

TEST(CliTune, AMissingOrForeignProfileIsAClearError) {
  testfiles::TempDir tmp("strata-tune-foreign");
  const std::string gen = "generate " + fixture("ds_mtp").string() + " --prompt-ids 1,2 -n 1";
  expect_clean_error(run_strata(gen + " --profile " + (tmp / "none.json").string()), "no such file");
  TuneProfile other = sample();
  other.machine = "elsewhere";
  save_profile(other, tmp / "tune" / (machine_key() + ".json"));
  expect_clean_error(run_strata(gen, "STRATA_HOME=" + tmp.path().string()), "another machine");
  EXPECT_EQ(run_strata(gen + " --profile none", "STRATA_HOME=" + tmp.path().string()).exit_code, 0);
}

TEST(CliTune, BadArgumentsAreCleanErrors) {
  expect_clean_error(run_strata("tune --seconds 0"), "--seconds");
  expect_clean_error(run_strata("tune --test-file-mib 1"), "--test-file-mib");
  expect_clean_error(run_strata("tune /nonexistent/model --seconds 0.01"), "/nonexistent/model");
}

// A model that cannot run within the budget is the loader's one error before
// anything is measured, and no profile is saved that would say nothing of it.
TEST(CliTune, AModelThatNeverRunsIsAnErrorAndNothingIsSaved) {
  testfiles::TempDir tmp("strata-tune-small");
  const std::string env = "STRATA_BUDGET_COMPUTE_MIB=4 STRATA_HOME=" + tmp.path().string();
  const CommandResult r = run_strata("tune " + fixture("ds_mtp").string() + " --ram 0.002 --seconds 0.02", env);
  expect_clean_error(r, "--ram 0.00 GiB is too small for");
  EXPECT_FALSE(fs::exists(tmp / "tune" / (machine_key() + ".json")));
}

}  // namespace
}  // namespace strata
