// strata bench (runtime/bench_run.h) end to end on a fixture: the runs in
// balanced order, the log's fields, and its three outputs (JSON that parses,
// a Markdown table, SVG documents that parse).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using clitest::CommandResult;
using clitest::expect_clean_error;
using clitest::fixture;
using clitest::read_all;
using clitest::run_strata;

TEST(CliBench, RunsInBalancedOrderAndWritesJsonMarkdownAndSvg) {
  testfiles::TempDir tmp("strata-bench");
  const fs::path out = tmp / "out";
  const CommandResult r = run_strata("bench " + fixture("ds_mtp").string() +
                                         " --ram 1 --ram 2 --runs 2 --prompt 8 --tokens 3 --probe-seconds 0.05 "
                                         "--no-drop-caches --threads 1 --out " + out.string(),
                                     "STRATA_HOME=" + tmp.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(read_all(out / "bench.json"));
  // Forwards, then backwards.
  std::vector<std::string> order;
  for (const auto& run : j["runs"]) order.push_back(run["config"]);
  EXPECT_EQ(order, (std::vector<std::string>{"--ram 1", "--ram 2", "--ram 2", "--ram 1"}));
  for (const auto& run : j["runs"]) {
    EXPECT_EQ(run["cache"], "not dropped: --no-drop");
    EXPECT_GT(run["ttft_s"].get<double>(), 0);
    EXPECT_GT(run["decode_tok_s"].get<double>(), 0);
    EXPECT_GT(run["probe_before_gbps"].get<double>(), 0);
    EXPECT_GT(run["probe_after_gbps"].get<double>(), 0);
    EXPECT_EQ(run["stats"]["prompt_tokens"], 8);
    EXPECT_EQ(run["stats"]["output_tokens"], 4);
    EXPECT_TRUE(run["stats"].contains("experts"));  // streamed under a budget
  }
  // The log: machine, commit, model, budgets, numeric mode, prompt and output tokens.
  EXPECT_FALSE(j["machine"]["cpu"].get<std::string>().empty());
  EXPECT_GT(j["machine"]["cores"].get<unsigned>(), 0u);
  EXPECT_FALSE(j["commit"].get<std::string>().empty());
  EXPECT_EQ(j["model"]["path"], fixture("ds_mtp").string());
  EXPECT_EQ(j["numeric_mode"], "exact");
  EXPECT_EQ(j["settings"]["ram_bytes"], nlohmann::json::array({1ull << 30, 2ull << 30}));
  EXPECT_EQ(j["settings"]["prompt_tokens"], 8);
  ASSERT_EQ(j["summary"].size(), 2u);
  for (const auto& c : j["summary"]) {
    EXPECT_LE(c["decode_tok_s"]["min"].get<double>(), c["decode_tok_s"]["median"].get<double>());
    EXPECT_LE(c["decode_tok_s"]["median"].get<double>(), c["decode_tok_s"]["max"].get<double>());
  }
  const std::string md = read_all(out / "summary.md");
  EXPECT_NE(md.find("| --ram 1 |"), std::string::npos) << md;
  EXPECT_NE(md.find("not dropped: --no-drop"), std::string::npos) << md;
  EXPECT_NE(r.out.find("| --ram 2 |"), std::string::npos);
  // Each chart is a well-formed SVG document with a bar per configuration.
  for (const char* chart : {"decode.svg", "ttft.svg"}) {
    const std::string check = "python3 -c \"import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); "
                              "assert d.documentElement.tagName == 'svg'; "
                              "assert len([r for r in d.getElementsByTagName('rect') "
                              "if r.getAttribute('fill') == '#4a7ab5']) == 2\" " + (out / chart).string();
    EXPECT_EQ(std::system(check.c_str()), 0) << chart << ": " << read_all(out / chart);
  }
}

TEST(CliBench, BadArgumentsAreCleanErrors) {
  const std::string model = fixture("ds_mtp").string();
  expect_clean_error(run_strata("bench " + model + " --runs 0"), "--runs");
  expect_clean_error(run_strata("bench " + model + " --ram -1"), "--ram");
  expect_clean_error(run_strata("bench " + model + " --prompt 0"), "--prompt");
  expect_clean_error(run_strata("bench " + model + " --probe-seconds nan"), "--probe-seconds");
  expect_clean_error(run_strata("bench /nonexistent/model --runs 1"), "/nonexistent/model");
  // More tokens than the context holds: refused, not measured over fewer.
  testfiles::TempDir tmp("strata-bench-ctx");
  expect_clean_error(run_strata("bench " + model + " --runs 1 --probe-seconds 0 --no-drop-caches --prompt 120 --tokens 30 --out " +
                                (tmp / "out").string()),
                     "do not fit the context of 128");
  EXPECT_FALSE(fs::exists(tmp / "out")) << "the folder made for the results is removed again";
}

}  // namespace
}  // namespace strata
