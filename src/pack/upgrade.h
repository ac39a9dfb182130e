#pragma once
// `strata upgrade DIR --full`: a streaming install (remote/remote_mirror.h)
// made whole. Every byte of its files that is not on the drive yet is
// fetched (what earlier runs fetched is kept), many ranges in flight and at
// most `max_rate` bytes a second; then each file is checked whole against
// the sha256 its source publishes (hub LFS files), else against the
// source's block sums (remote/block_sums.h); a file that fails is fetched
// again once from scratch, then is an error. The folder is then
// recorded as full: from then on it loads as a plain checkpoint, without any
// network access, and `strata pack` takes it.
//
// Resumable: killed at any moment, a re-run fetches only what present.log
// does not list. It may run beside a `strata generate/serve` of the same
// folder (both append to present.log; a range both fetch is written twice,
// with the same bytes). One pull or upgrade at a time per DIR.
#include <cstdint>
#include <filesystem>
#include <string>

#include "remote/http_client.h"
#include "remote/source.h"

namespace strata {

struct UpgradeOptions {
  std::filesystem::path dir;
  int connections = 8;
  double max_rate = 0;  // bytes a second in all; 0: no limit
  bool progress = false;
  RetryPolicy retry;
  EnvLookup env = process_env;
};

struct UpgradeReport {
  std::string source;
  int64_t files = 0;
  uint64_t bytes = 0;          // the files' bytes in all
  uint64_t local_bytes = 0;    // on the drive before this run
  uint64_t fetched_bytes = 0;  // fetched by this run
  int64_t verified = 0;        // files checked against a published sha256 or block sums
  int64_t refetched = 0;       // files that failed it once and were fetched again
  bool already_full = false;
  double seconds = 0;
};

UpgradeReport upgrade_full(const UpgradeOptions& options);

}  // namespace strata
