// `strata generate --timeline FILE`: the prompt's and the decode's spans in
// Chrome's trace event format (util/timeline.h), checked against the run's
// own statistics: each drive's read spans carry exactly the bytes the drive
// read, and they cover exactly the time it was busy (both are taken at the
// same instants: a read's issue and its completion).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cli_support.h"
#include "safetensors_writer.h"

namespace strata {
namespace {

using clitest::CommandResult;
using clitest::fixture;
using clitest::run_strata;
using nlohmann::json;
namespace fs = std::filesystem;

// The total length of the union of [begin, end) intervals.
double covered(std::vector<std::pair<double, double>> spans) {
  std::sort(spans.begin(), spans.end());
  double total = 0, to = -1e300;
  for (auto [b, e] : spans) {
    if (e <= to) continue;
    total += e - std::max(b, to);
    to = e;
  }
  return total;
}

TEST(CliTimeline, ReadSpansAreTheDrivesBytesAndBusyTimeAndEveryLayerShows) {
  testfiles::TempDir tmp("strata-timeline");
  fs::create_directories(tmp / "experts");
  const CommandResult packed = run_strata("pack " + fixture("qwen_gqa").string() + " --out " + (tmp / "pack").string() +
                                          " --drive " + (tmp / "experts").string() + " -q");
  ASSERT_EQ(packed.exit_code, 0) << packed.err;
  const fs::path file = tmp / "timeline.json";
  const CommandResult r = run_strata("generate " + (tmp / "pack").string() + " " + clitest::kAmpleRam +
                                     " --prompt-ids 5,6,7,8,9 -n 6 --ignore-eos --json --heat none --timeline " +
                                     file.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json stats = json::parse(r.out)["stats"]["experts"];
  const json events = json::parse(clitest::read_all(file))["traceEvents"];

  std::map<int, std::string> tracks;
  for (const json& e : events)
    if (e["ph"] == "M") tracks[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
  uint64_t read_bytes = 0, stats_bytes = 0;
  double stats_busy_us = 0;
  std::map<int, std::vector<std::pair<double, double>>> reads;
  std::vector<bool> attention(3), experts(3);
  for (const json& e : events) {
    if (e["ph"] != "X") continue;
    const std::string track = tracks.at(e["tid"].get<int>()), name = e["name"];
    const double ts = e["ts"], dur = e["dur"];
    EXPECT_GE(dur, 0.0) << name;
    if (track.rfind("drive ", 0) == 0) {
      ASSERT_TRUE(name == "read" || name == "background read") << name;
      read_bytes += e["args"]["bytes"].get<uint64_t>();
      reads[e["tid"].get<int>()].emplace_back(ts, ts + dur);
    } else if (track == "phase") {
      EXPECT_TRUE(name == "prompt" || name == "decode") << name;
    } else {
      ASSERT_EQ(track, "step");
      for (int l = 0; l < 3; ++l) {
        if (name == "attention " + std::to_string(l)) attention[l] = true;
        if (name == "experts " + std::to_string(l)) experts[l] = true;
      }
    }
  }
  for (const char* phase : {"prefill", "decode"})
    for (const json& d : stats[phase]["drives"]) {
      stats_bytes += d["bytes"].get<uint64_t>();
      stats_busy_us += d["busy_s"].get<double>() * 1e6;
    }
  EXPECT_GT(read_bytes, 0u);
  EXPECT_EQ(read_bytes, stats_bytes);
  ASSERT_EQ(reads.size(), 1u);  // one drive folder
  EXPECT_NEAR(covered(reads.begin()->second), stats_busy_us, 1e-3 * stats_busy_us + 1.0);
  EXPECT_EQ(attention, std::vector<bool>(3, true));
  EXPECT_EQ(experts, std::vector<bool>(3, true));

  // tools/timeline_summary.py reads it: each phase with the drive's bytes.
  const fs::path summary = tmp / "summary.txt";
  const std::string cmd = "python3 " + (fs::path(STRATA_TESTS_DIR) / ".." / "tools" / "timeline_summary.py").string() +
                          " " + file.string() + " > " + summary.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const std::string text = clitest::read_all(summary);
  EXPECT_NE(text.find("== prompt"), std::string::npos) << text;
  EXPECT_NE(text.find("== decode"), std::string::npos) << text;
  char gb[32];
  std::snprintf(gb, sizeof gb, "%.3f GB read", (stats["prefill"]["drives"][0]["bytes"].get<uint64_t>()) / 1e9);
  EXPECT_NE(text.find(gb), std::string::npos) << "expected '" << gb << "' in:\n" << text;
}

TEST(CliTimeline, AnUnwritableTimelineIsOneClearError) {
  testfiles::TempDir tmp("strata-timeline");
  const CommandResult r = run_strata("generate " + fixture("qwen_gqa").string() +
                                     " --prompt-ids 5,6 -n 2 --heat none --json --timeline " +
                                     (tmp / "no" / "such" / "dir" / "t.json").string());
  clitest::expect_clean_error(r, "could not write the timeline");
}

}  // namespace
}  // namespace strata
