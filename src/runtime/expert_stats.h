#pragma once
// Expert-streaming statistics as the CLI reports them (--json "experts").
#include <nlohmann/json.hpp>

#include "model/expert_provider.h"

namespace strata {

// What happened between two snapshots of the same provider.
ExpertStats stats_delta(const ExpertStats& later, const ExpertStats& earlier);

// {"bytes_read", "bytes_needed", "unique_bytes", "read_amplification", "hits", "misses", "hit_rate", "io_wait_s",
//  "io_wait_share", "gbps" (bytes_read / wall), "drives": [{"name", "bytes",
//  "busy_s", "gbps", "mean_in_flight" (a drive's, not a remote source's)}], "prefetch": {"issued", "used", "predicted",
//  "predicted_right", "accuracy"}, "cache_slots", "cache_slot_bytes", "pinned",
//  "device": {"vram_hits", "uploads", "bytes_uploaded", "from_host", "vram_cache_bytes",
//              "host_staging_bytes", "bytes_in_place", "layers_routed_on_device",
//              "dispatches", "barriers"}}
// `wall_s` is the time the snapshot covers.
nlohmann::json expert_stats_json(const ExpertStats& s, double wall_s);

}  // namespace strata
