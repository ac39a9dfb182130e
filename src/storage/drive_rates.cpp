#include "storage/drive_rates.h"

#include <unistd.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "storage/atomic_file.h"
#include "storage/probe.h"
#include "util/cache_dir.h"
#include "util/error.h"
#include "util/json_file.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

constexpr const char* kPhaseNames[] = {"prefill", "decode"};

bool sane(double v) { return std::isfinite(v) && v >= 0; }

// The least busy time a sample may have: a nanosecond (no read is faster).
constexpr double kLeastBusySeconds = 1e-9;

void keep_latest(std::vector<DriveRunSample>& samples) {
  if (samples.size() > DriveRates::kKeptRuns) samples.erase(samples.begin(), samples.end() - DriveRates::kKeptRuns);
}

DriveRunSample sample_from(const nlohmann::json& j, const std::string& what) {
  if (!j.is_object()) throw Error(what + ": a sample is not an object");
  DriveRunSample s;
  const std::optional<int64_t> bytes = j.contains("bytes") ? json_int64(j["bytes"]) : std::nullopt;
  if (!bytes || *bytes < 0) throw Error(what + ": a sample's \"bytes\" is not a whole number of bytes");
  s.bytes = static_cast<uint64_t>(*bytes);
  for (auto [key, field] : {std::pair{"busy_s", &s.busy_s}, std::pair{"in_flight", &s.in_flight}}) {
    if (!j.contains(key) || !j[key].is_number() || !sane(j[key].get<double>()))
      throw Error(what + ": a sample's \"" + key + "\" is not a finite number of at least 0");
    *field = j[key].get<double>();
  }
  // As add() keeps them: a rate from a time too short to be one would be
  // infinite.
  if (!(s.busy_s >= kLeastBusySeconds)) throw Error(what + ": a sample's \"busy_s\" is not above 0");
  if (j.contains("when") && j["when"].is_string()) s.when = j["when"].get<std::string>();
  return s;
}

}  // namespace

double DriveRateRecord::gbps(ReadPhase phase) const {
  double bytes = 0, busy = 0;
  for (const DriveRunSample& s : samples(phase)) {
    bytes += static_cast<double>(s.bytes);
    busy += s.busy_s;
  }
  return busy > 0 ? bytes / busy / 1e9 : 0.0;
}

const DriveRateRecord* DriveRates::drive_for(const fs::path& path) const {
  const std::string dev = device_of(path);
  if (dev.empty()) return nullptr;
  for (const DriveRateRecord& d : drives)
    if (d.device == dev) return &d;
  return nullptr;
}

bool DriveRates::add(const std::string& device, const std::string& name, ReadPhase phase, const DriveRunSample& sample) {
  if (device.empty() || sample.bytes < kLeastRunBytes || !(sample.busy_s >= kLeastBusySeconds) ||
      !std::isfinite(sample.busy_s) || !sane(sample.in_flight))
    return false;
  DriveRateRecord& r = record(device);
  r.name = name;
  std::vector<DriveRunSample>& kept = r.samples(phase);
  kept.push_back(sample);
  keep_latest(kept);
  return true;
}

DriveRateRecord& DriveRates::record(const std::string& device) {
  for (DriveRateRecord& d : drives)
    if (d.device == device) return d;
  DriveRateRecord& d = drives.emplace_back();
  d.device = device;
  return d;
}

fs::path default_drive_rates_path() { return strata_cache_dir() / "drive_rates.json"; }

std::optional<DriveRates> load_drive_rates(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  const std::string what = path.string();
  const nlohmann::json j = parse_json_or_discarded(read_text_file(path));
  if (j.is_discarded() || !j.is_object()) throw Error(what + ": not a strata drive rates file (invalid JSON)");
  if (!j.contains("version") || j["version"] != 1) throw Error(what + ": not a version 1 drive rates file");
  if (!j.contains("drives") || !j["drives"].is_array()) throw Error(what + ": no \"drives\" list");
  DriveRates rates;
  for (const nlohmann::json& d : j["drives"]) {
    if (!d.is_object() || !d.contains("device") || !d["device"].is_string() || d["device"].get<std::string>().empty())
      throw Error(what + ": a drive without its \"device\"");
    // A drive listed twice is one record (samples in the file's order).
    DriveRateRecord& r = rates.record(d["device"].get<std::string>());
    if (d.contains("name") && d["name"].is_string()) r.name = d["name"].get<std::string>();
    for (ReadPhase phase : {ReadPhase::Prefill, ReadPhase::Decode}) {
      const char* key = kPhaseNames[static_cast<int>(phase)];
      if (!d.contains(key)) continue;
      if (!d[key].is_array()) throw Error(what + ": drive " + r.device + "'s \"" + key + "\" is not a list");
      for (const nlohmann::json& s : d[key]) r.samples(phase).push_back(sample_from(s, what));
    }
  }
  for (DriveRateRecord& r : rates.drives)
    for (ReadPhase phase : {ReadPhase::Prefill, ReadPhase::Decode}) keep_latest(r.samples(phase));
  return rates;
}

void save_drive_rates(const DriveRates& rates, const fs::path& path) {
  nlohmann::json drives = nlohmann::json::array();
  for (const DriveRateRecord& r : rates.drives) {
    nlohmann::json d = {{"device", r.device}, {"name", r.name}};
    for (ReadPhase phase : {ReadPhase::Prefill, ReadPhase::Decode}) {
      nlohmann::json list = nlohmann::json::array();
      for (const DriveRunSample& s : r.samples(phase))
        list.push_back({{"bytes", s.bytes}, {"busy_s", s.busy_s}, {"in_flight", s.in_flight}, {"when", s.when}});
      d[kPhaseNames[static_cast<int>(phase)]] = std::move(list);
    }
    drives.push_back(std::move(d));
  }
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  if (ec) throw Error(path.parent_path().string() + ": cannot create directory: " + ec.message());
  // A file of this process's own first (two runs finishing at once would
  // share write_file_atomically's <path>.tmp), then renamed over the file.
  const fs::path own = path.string() + "." + std::to_string(::getpid());
  write_file_atomically(own, nlohmann::json({{"version", 1}, {"drives", drives}}).dump(2) + "\n");
  fs::rename(own, path, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(own, ec);
    throw Error(path.string() + ": cannot write: " + why);
  }
}

}  // namespace strata
