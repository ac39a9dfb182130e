#include "runtime/drive_rate_log.h"

#include <exception>

#include "storage/probe.h"
#include "util/utc_time.h"

namespace strata {

namespace {

// Adds one phase's drives; true when any was added.
bool add_phase(DriveRates& rates, const ExpertStats& stats, ReadPhase phase, const std::string& when) {
  bool added = false;
  for (const ExpertStats::Drive& d : stats.drives) {
    if (d.device == 0 || d.in_flight_s <= 0 || d.fetched_reads > 0) continue;
    const DriveRunSample sample{d.bytes, d.busy_s, d.busy_s > 0 ? d.in_flight_s / d.busy_s : 0.0, when};
    added = rates.add(device_string(d.device), d.name, phase, sample) || added;
  }
  return added;
}

}  // namespace

std::string record_drive_rates(const ExpertStats& prefill, const ExpertStats& decode, const std::filesystem::path& path) {
  const std::string when = utc_now();
  std::string replaced;
  DriveRates rates;
  try {
    if (std::optional<DriveRates> kept = load_drive_rates(path)) rates = std::move(*kept);
  } catch (const std::exception& e) {
    replaced = std::string(e.what()) + ": replaced by this run's rates; ";
  }
  // (Both phases, whatever the first added.)
  const bool any = add_phase(rates, prefill, ReadPhase::Prefill, when) | add_phase(rates, decode, ReadPhase::Decode, when);
  if (!any) return {};  // nothing written, a file that is not one left as it is
  try {
    save_drive_rates(rates, path);
  } catch (const std::exception& e) {
    return replaced + e.what();
  }
  return replaced.empty() ? std::string() : replaced.substr(0, replaced.size() - 2);
}

}  // namespace strata
