// What runs got from each drive (storage/drive_rates.h), recorded after a run
// (runtime/drive_rate_log.h) for `strata budget`: the pooled rate, the runs
// kept, the file's round trip and its refusals.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/drive_rate_log.h"
#include "storage/drive_rates.h"
#include "storage/probe.h"
#include "storage_test_support.h"
#include "util/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using storage_test::TempDir;

constexpr uint64_t kMB = 1000 * 1000;

DriveRunSample sample(uint64_t bytes, double busy_s, double in_flight = 5) { return {bytes, busy_s, in_flight, "t"}; }

// Bytes over busy time, pooled: 400 MB in 0.2 s and 100 MB in 0.1 s read
// 500 MB in 0.3 s, 1.667 GB/s (not the mean of 2.0 and 1.0).
TEST(DriveRates, ARateIsTheKeptRunsBytesOverTheirBusyTime) {
  DriveRates r;
  ASSERT_TRUE(r.add("8:0", "sda", ReadPhase::Decode, sample(400 * kMB, 0.2)));
  ASSERT_TRUE(r.add("8:0", "sda", ReadPhase::Decode, sample(100 * kMB, 0.1)));
  ASSERT_TRUE(r.add("8:0", "sda", ReadPhase::Prefill, sample(200 * kMB, 0.25)));
  ASSERT_EQ(r.drives.size(), 1u);
  EXPECT_DOUBLE_EQ(r.drives[0].gbps(ReadPhase::Decode), 0.5 / 0.3);
  EXPECT_DOUBLE_EQ(r.drives[0].gbps(ReadPhase::Prefill), 0.8);
  // Another drive is a record of its own; a phase without runs has no rate.
  ASSERT_TRUE(r.add("259:1", "nvme0n1", ReadPhase::Prefill, sample(100 * kMB, 0.05)));
  ASSERT_EQ(r.drives.size(), 2u);
  EXPECT_EQ(r.drives[1].gbps(ReadPhase::Decode), 0.0);
  EXPECT_DOUBLE_EQ(r.drives[1].gbps(ReadPhase::Prefill), 2.0);
}

TEST(DriveRates, OnlyTheLatestRunsAreKeptAndSmallOnesNotAtAll) {
  DriveRates r;
  for (uint64_t i = 1; i <= DriveRates::kKeptRuns + 2; ++i)
    ASSERT_TRUE(r.add("8:0", "sda", ReadPhase::Decode, sample(100 * kMB * i, 0.1)));
  const std::vector<DriveRunSample>& kept = r.drives.at(0).decode;
  ASSERT_EQ(kept.size(), DriveRates::kKeptRuns);
  EXPECT_EQ(kept.front().bytes, 300 * kMB);  // the first two went
  EXPECT_EQ(kept.back().bytes, 100 * kMB * (DriveRates::kKeptRuns + 2));
  // A handful of reads, no busy time, a remote source (no device): left out.
  EXPECT_FALSE(r.add("8:0", "sda", ReadPhase::Decode, sample(DriveRates::kLeastRunBytes - 1, 0.1)));
  EXPECT_FALSE(r.add("8:0", "sda", ReadPhase::Decode, sample(100 * kMB, 0)));
  EXPECT_FALSE(r.add("", "source", ReadPhase::Decode, sample(100 * kMB, 0.1)));
  EXPECT_EQ(r.drives.at(0).decode.size(), DriveRates::kKeptRuns);
}

TEST(DriveRates, TheFileRoundTrips) {
  TempDir dir;
  const fs::path path = dir.path() / "sub" / "drive_rates.json";
  EXPECT_FALSE(load_drive_rates(path).has_value());
  DriveRates r;
  r.add("8:0", "sda", ReadPhase::Decode, {123456789, 0.0625, 5.25, "2026-12-07T10:00:00Z"});
  r.add("8:0", "sda", ReadPhase::Prefill, {987654321, 0.5, 13.5, "2026-12-07T10:00:01Z"});
  save_drive_rates(r, path);
  const std::optional<DriveRates> back = load_drive_rates(path);
  ASSERT_TRUE(back.has_value());
  ASSERT_EQ(back->drives.size(), 1u);
  const DriveRateRecord& d = back->drives[0];
  EXPECT_EQ(d.device, "8:0");
  EXPECT_EQ(d.name, "sda");
  ASSERT_EQ(d.decode.size(), 1u);
  ASSERT_EQ(d.prefill.size(), 1u);
  EXPECT_EQ(d.decode[0].bytes, 123456789u);
  EXPECT_EQ(d.decode[0].busy_s, 0.0625);
  EXPECT_EQ(d.decode[0].in_flight, 5.25);
  EXPECT_EQ(d.decode[0].when, "2026-12-07T10:00:00Z");
  EXPECT_EQ(d.prefill[0].bytes, 987654321u);
  EXPECT_EQ(d.prefill[0].in_flight, 13.5);
}

TEST(DriveRates, AFileThatIsNotOneIsOneErrorNamingIt) {
  TempDir dir;
  const fs::path path = dir.path() / "drive_rates.json";
  const std::string nested(100000, '[');
  for (const std::string& text :
       {std::string("not json"), std::string("[1]"), std::string(R"({"version": 2, "drives": []})"),
        std::string(R"({"version": 1})"), std::string(R"({"version": 1, "drives": [{"name": "sda"}]})"),
        std::string(R"({"version": 1, "drives": [{"device": "8:0", "decode": {}}]})"),
        std::string(R"({"version": 1, "drives": [{"device": "8:0", "decode": [{"bytes": -1, "busy_s": 1, "in_flight": 1}]}]})"),
        std::string(R"({"version": 1, "drives": [{"device": "8:0", "decode": [{"bytes": 1, "busy_s": "x", "in_flight": 1}]}]})"),
        std::string(R"({"version": 1, "drives": [{"device": "8:0", "decode": [{"bytes": 1, "busy_s": 1}]}]})"),
        std::string(R"({"version": 1, "drives": [{"device": "8:0", "prefill": [7]}]})"),
        std::string(R"({"version": 1, "drives": [{"device": "8:0", "decode": [{"bytes": 1, "busy_s": 0, "in_flight": 1}]}]})"),
        std::string(R"({"version": 1, "drives": [{"device": "8:0", "decode": [{"bytes": 1, "busy_s": 1e-320, "in_flight": 1}]}]})"),
        nested}) {
    SCOPED_TRACE(text.substr(0, 80));
    std::ofstream(path) << text;
    try {
      load_drive_rates(path);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
    }
  }
}

// A file written by hand or by an older strata: a drive listed twice is one
// record, and a list longer than kept keeps its latest runs.
TEST(DriveRates, AFilesDuplicatesAreMergedAndLongListsCut) {
  TempDir dir;
  const fs::path path = dir.path() / "drive_rates.json";
  std::string decode;
  for (int i = 1; i <= 10; ++i)
    decode += std::string(i > 1 ? "," : "") + R"({"bytes": )" + std::to_string(i * 100000000) +
              R"(, "busy_s": 0.1, "in_flight": 5})";
  std::ofstream(path) << R"({"version": 1, "drives": [{"device": "8:0", "name": "sda", "prefill": [{"bytes": 100000000, "busy_s": 0.1, "in_flight": 9}]},
                          {"device": "8:0", "decode": [)" + decode + "]}]}";
  const std::optional<DriveRates> r = load_drive_rates(path);
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->drives.size(), 1u);
  EXPECT_EQ(r->drives[0].prefill.size(), 1u);
  ASSERT_EQ(r->drives[0].decode.size(), DriveRates::kKeptRuns);
  EXPECT_EQ(r->drives[0].decode.front().bytes, 300000000u);
  EXPECT_EQ(r->drives[0].decode.back().bytes, 1000000000u);
}

ExpertStats::Drive drive_stats(uint64_t device, uint64_t bytes, double busy_s, double in_flight_s) {
  ExpertStats::Drive d;
  d.name = "vdz";
  d.device = device;
  d.bytes = bytes;
  d.busy_s = busy_s;
  d.in_flight_s = in_flight_s;
  return d;
}

// After a run: each phase's drives, by device; a streaming install's source
// (its reads waited for the network) and a drive that read too little are
// left out; the file is found again by a path on the drive.
TEST(DriveRateLog, ARunsPhasesAreRecordedByDevice) {
  TempDir dir;
  struct stat st;
  ASSERT_EQ(::stat(dir.path().c_str(), &st), 0);
  const fs::path path = dir.path() / "drive_rates.json";
  ExpertStats prefill, decode;
  prefill.drives = {drive_stats(st.st_dev, 600 * kMB, 0.3, 0.3 * 14)};
  decode.drives = {drive_stats(st.st_dev, 100 * kMB, 0.05, 0.05 * 5), drive_stats(st.st_dev + 1, kMB, 0.01, 0.01)};
  // A streaming install's mirror (reads that waited for fetches) and a
  // remote source (no device, no reads in flight counted).
  ExpertStats::Drive mirror = drive_stats(st.st_dev + 2, 500 * kMB, 1, 1);
  mirror.fetched_reads = 3;
  decode.drives.push_back(mirror);
  decode.drives.push_back(drive_stats(0, 500 * kMB, 1, 0));
  EXPECT_EQ(record_drive_rates(prefill, decode, path), "");
  EXPECT_EQ(record_drive_rates(prefill, decode, path), "");  // a second run adds to the first
  const std::optional<DriveRates> r = load_drive_rates(path);
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->drives.size(), 1u);
  const DriveRateRecord* d = r->drive_for(dir.path());
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->name, "vdz");
  EXPECT_EQ(d->device, device_string(st.st_dev));
  ASSERT_EQ(d->prefill.size(), 2u);
  ASSERT_EQ(d->decode.size(), 2u);
  EXPECT_DOUBLE_EQ(d->prefill[0].in_flight, 14.0);
  EXPECT_DOUBLE_EQ(d->gbps(ReadPhase::Prefill), 2.0);
  EXPECT_DOUBLE_EQ(d->gbps(ReadPhase::Decode), 2.0);

  // A run with nothing to add writes nothing; a file that is not one is
  // replaced by the run's samples, said so.
  const fs::path other = dir.path() / "other.json";
  EXPECT_EQ(record_drive_rates({}, {}, other), "");
  EXPECT_FALSE(fs::exists(other));
  std::ofstream(other) << "{broken";
  const std::string why = record_drive_rates(prefill, decode, other);
  EXPECT_NE(why.find("replaced"), std::string::npos) << why;
  ASSERT_TRUE(load_drive_rates(other).has_value());
  EXPECT_EQ(load_drive_rates(other)->drives.at(0).prefill.size(), 1u);
  // A folder where the file should be: the reason, not an exception.
  fs::create_directories(dir.path() / "taken.json" / "x");
  EXPECT_FALSE(record_drive_rates(prefill, decode, dir.path() / "taken.json").empty());
}

}  // namespace
}  // namespace strata
