// `strata generate --timeline FILE`: the prompt's and the decode's spans in
// Chrome's trace event format (util/timeline.h), checked against the run's
// own statistics: each drive's read spans carry exactly the bytes the drive
// read, and they cover exactly the time it was busy (both are taken at the
// same instants: a read's issue and its completion).
#include <gtest/gtest.h>

#include <algorithm>
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

// A drive's track, its lanes ("drive 0 (vda) #2") folded into it.
std::string drive_of(const std::string& track) { return track.substr(0, track.find(" #")); }

TEST(CliTimeline, ReadSpansAreTheDrivesBytesAndBusyTimeAndEveryLayerShows) {
  testfiles::TempDir tmp("strata-timeline");
  fs::create_directories(tmp / "experts");
  const CommandResult packed = run_strata("pack " + fixture("qwen_gqa").string() + " --out " + (tmp / "pack").string() +
                                          " --drive " + (tmp / "experts").string() + " -q");
  ASSERT_EQ(packed.exit_code, 0) << packed.err;
  // Runs that end with guesses still in flight (-n 3 on this fixture) too:
  // the run lets them land before its stats and its timeline are taken.
  for (const int n : {3, 6}) {
    SCOPED_TRACE("-n " + std::to_string(n));
    const fs::path file = tmp / ("timeline" + std::to_string(n) + ".json");
    const CommandResult r = run_strata("generate " + (tmp / "pack").string() + " " + clitest::kAmpleRam +
                                       " --prompt-ids 5,6,7,8,9 -n " + std::to_string(n) +
                                       " --ignore-eos --json --heat none --timeline " + file.string());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json stats = json::parse(r.out)["stats"]["experts"];
    const json events = json::parse(clitest::read_all(file))["traceEvents"];

    std::map<int, std::string> tracks;
    for (const json& e : events)
      if (e["ph"] == "M") tracks[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
    uint64_t read_bytes = 0, stats_bytes = 0;
    double stats_busy_us = 0;
    std::map<std::string, std::vector<std::pair<double, double>>> reads;  // per drive, its lanes together
    std::map<int, double> lane_end;  // each row's spans must not overlap (viewers drop those that do)
    std::vector<bool> attention(3), experts(3);
    for (const json& e : events) {
      if (e["ph"] != "X") continue;
      const int tid = e["tid"].get<int>();
      const std::string track = tracks.at(tid), name = e["name"];
      const double ts = e["ts"], dur = e["dur"];
      EXPECT_GE(dur, 0.0) << name;
      if (track.rfind("drive ", 0) == 0) {
        ASSERT_TRUE(name == "read" || name == "background read") << name;
        EXPECT_GE(ts, lane_end[tid]) << track << ": overlapping spans in one row";
        lane_end[tid] = ts + dur;
        read_bytes += e.value("args", json::object()).value("bytes", uint64_t{0});
        reads[drive_of(track)].emplace_back(ts, ts + dur);
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
    const std::string cmd = "python3 " +
                            (fs::path(STRATA_TESTS_DIR) / ".." / "tools" / "timeline_summary.py").string() + " " +
                            file.string() + " > " + summary.string();
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    const std::string text = clitest::read_all(summary);
    EXPECT_NE(text.find("== prompt"), std::string::npos) << text;
    EXPECT_NE(text.find("== decode"), std::string::npos) << text;
    const std::string all_bytes = std::to_string(read_bytes) + " bytes read in all";
    EXPECT_NE(text.find(all_bytes), std::string::npos) << "expected '" << all_bytes << "' in:\n" << text;
  }
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
