#pragma once
// `strata warm DIR` and `serve --warm`: a streaming install's experts that
// are most likely to be needed next, fetched ahead while the machine is
// idle, so that decoding later reads them from the drive.
//
// Which: the (layer, expert) pairs counted in router traces and heat files
// (`from`, runtime/heat_summary.h), else in the install's own heat (what
// earlier runs of it recorded, model/expert_heat.h), hottest first. An
// expert whose bytes are all on the drive is skipped; one that would take
// the fetched bytes past `budget_bytes` ends the warm-up. Fetches are
// Background: a reader's fetch of the same install in this process goes
// first (remote/remote_mirror.h), at most `max_rate` bytes a second.
// `stop()` is asked between batches of experts (a batch is `connections`
// experts; what is in flight finishes, a few MB): it is how serve hands the
// network back to a request that arrives.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace strata {

struct InstallWarmupOptions {
  std::filesystem::path dir;
  std::vector<std::filesystem::path> from;  // traces / heat files; empty: the install's own heat
  uint64_t budget_bytes = 0;                // 0: no limit
  double budget_share = 0;                  // > 0: the budget is this share of all routed experts' bytes
  // Without `from` and without recorded heat: every expert, layer by layer
  // in id order (pull --local-share), rather than an error.
  bool any_order_without_heat = false;
  double max_rate = 0;                      // bytes a second; 0: no limit
  int connections = 4;  // a batch's experts, and the mirror's requests in flight; 0: batches of 4, the mirror as it is
  bool progress = false;
  std::function<bool()> stop;
};

struct InstallWarmupReport {
  std::string heat;          // where the ranking came from
  int64_t ranked = 0;        // experts with a count
  int64_t already_local = 0; // of those, on the drive before
  int64_t warmed = 0;        // fetched now
  uint64_t fetched_bytes = 0;  // what the warmed experts lacked (a range two of them share counted for each)
  bool budget_reached = false, stopped = false;
  double seconds = 0;
};

// Throws strata::Error when DIR is not a streaming install, did not finish,
// or there is no heat to rank by.
InstallWarmupReport warm_install(const InstallWarmupOptions& options);

}  // namespace strata
