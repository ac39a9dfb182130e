#include "runtime/expert_stats.h"

#include <algorithm>

namespace strata {

ExpertStats stats_delta(const ExpertStats& later, const ExpertStats& earlier) {
  ExpertStats d = later;
  d.requests -= earlier.requests;
  d.hits -= earlier.hits;
  d.misses -= earlier.misses;
  d.bytes_needed -= earlier.bytes_needed;
  d.bytes_read -= earlier.bytes_read;
  d.bytes_verified -= earlier.bytes_verified;
  d.prefetch_issued -= earlier.prefetch_issued;
  d.prefetch_used -= earlier.prefetch_used;
  d.prefetch_cancelled -= earlier.prefetch_cancelled;
  d.predicted -= earlier.predicted;
  d.predicted_right -= earlier.predicted_right;
  d.io_wait_s -= earlier.io_wait_s;
  d.device.hits -= earlier.device.hits;
  d.device.uploads -= earlier.device.uploads;
  d.device.bytes_uploaded -= earlier.device.bytes_uploaded;
  d.device.held_routes -= earlier.device.held_routes;
  d.device.staged -= earlier.device.staged;
  d.device.bytes_in_place -= earlier.device.bytes_in_place;
  d.device.dispatches -= earlier.device.dispatches;
  d.device.barriers -= earlier.device.barriers;
  // By name: a drive first seen later (a file opened since) shifts none.
  for (auto& drive : d.drives)
    for (const auto& before : earlier.drives)
      if (before.name == drive.name) {
        drive.bytes -= std::min(drive.bytes, before.bytes);
        drive.busy_s -= before.busy_s;
        drive.in_flight_s -= before.in_flight_s;
        drive.fetched_reads -= std::min(drive.fetched_reads, before.fetched_reads);
        drive.local_reads -= std::min(drive.local_reads, before.local_reads);
        drive.fetch_wait_s -= before.fetch_wait_s;
        break;
      }
  return d;
}

nlohmann::json expert_stats_json(const ExpertStats& s, double wall_s) {
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  nlohmann::json drives = nlohmann::json::array();
  for (const auto& d : s.drives) {
    nlohmann::json j = {{"name", d.name},
                        {"bytes", d.bytes},
                        {"busy_s", d.busy_s},
                        {"gbps", ratio(static_cast<double>(d.bytes) / 1e9, d.busy_s)}};
    // A remote source does not count its reads in flight: no figure rather than 0.
    if (d.in_flight_s > 0) j["mean_in_flight"] = ratio(d.in_flight_s, d.busy_s);
    if (d.fetched_reads + d.local_reads > 0) {
      // A streaming install's source: how many reads found their bytes
      // on the drive, and how long the others waited for the network.
      const double reads = static_cast<double>(d.fetched_reads + d.local_reads);
      j["fetched_reads"] = d.fetched_reads;
      j["local_reads"] = d.local_reads;
      j["local_share"] = static_cast<double>(d.local_reads) / reads;
      j["remote_share"] = static_cast<double>(d.fetched_reads) / reads;
      j["fetch_wait_s"] = d.fetch_wait_s;
      j["mean_fetch_wait_ms"] = ratio(d.fetch_wait_s * 1e3, static_cast<double>(d.fetched_reads));
    }
    drives.push_back(std::move(j));
  }
  return {{"requests", s.requests},
          {"hits", s.hits},
          {"misses", s.misses},
          {"hit_rate", ratio(static_cast<double>(s.hits), static_cast<double>(s.requests))},
          {"bytes_needed", s.bytes_needed},
          {"bytes_read", s.bytes_read},
          {"bytes_verified", s.bytes_verified},
          {"unique_bytes", s.unique_bytes},
          // Bytes read per byte of distinct experts needed: 1.00 = each read once.
          {"read_amplification", ratio(static_cast<double>(s.bytes_read), static_cast<double>(s.unique_bytes))},
          {"gbps", ratio(static_cast<double>(s.bytes_read) / 1e9, wall_s)},
          {"io_wait_s", s.io_wait_s},
          {"io_wait_share", ratio(s.io_wait_s, wall_s)},
          {"drives", drives},
          {"prefetch",
           {{"issued", s.prefetch_issued},
            {"used", s.prefetch_used},
            {"cancelled", s.prefetch_cancelled},
            {"predicted", s.predicted},
            {"predicted_right", s.predicted_right},
            {"accuracy", ratio(static_cast<double>(s.predicted_right), static_cast<double>(s.predicted))}}},
          {"cache_slots", s.cache_slots},
          {"cache_slot_bytes", s.cache_slot_bytes},
          {"pinned", s.pinned},
          // The tier each expert run was served from on a device backend.
          {"device",
           {{"vram_hits", s.device.hits},
            {"uploads", s.device.uploads},
            {"bytes_uploaded", s.device.bytes_uploaded},
            {"from_host", s.device.staged},
            {"vram_cache_bytes", s.device.capacity_bytes},
            {"host_staging_bytes", s.device.host_staging_bytes},
            {"bytes_in_place", s.device.bytes_in_place},
            {"layers_routed_on_device", s.device.held_routes},
            {"dispatches", s.device.dispatches},
            {"barriers", s.device.barriers}}}};
}

}  // namespace strata
