// strata upgrade: a streaming install made whole (pack/upgrade.h).
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "pack/upgrade.h"
#include "util/error.h"

namespace strata::cli {

namespace {

struct UpgradeArgs {
  std::string dir;
  bool full = false, json = false, quiet = false;
  int connections = 8;
  double max_rate_mb = 0;
};

int run_upgrade(const UpgradeArgs& a) {
  if (!a.full) throw Error("upgrade: say --full (every byte of the install fetched, then it needs no network)");
  UpgradeOptions o;
  o.dir = a.dir;
  o.connections = a.connections;
  o.max_rate = a.max_rate_mb * 1e6;
  o.progress = !a.quiet && !a.json;
  const UpgradeReport r = upgrade_full(o);
  if (a.json) {
    std::cout << nlohmann::json{{"dir", a.dir},
                                {"source", r.source},
                                {"files", r.files},
                                {"bytes", r.bytes},
                                {"local_bytes", r.local_bytes},
                                {"fetched_bytes", r.fetched_bytes},
                                {"verified", r.verified},
                                {"refetched", r.refetched},
                                {"already_full", r.already_full},
                                {"seconds", r.seconds}}
                     .dump()
              << "\n";
  } else if (!a.quiet) {
    if (r.already_full)
      std::fprintf(stderr, "%s is already a full install of %s\n", a.dir.c_str(), r.source.c_str());
    else
      std::fprintf(stderr,
                   "upgraded %s to a full install of %s: %.2f GB, %.2f GB of it on the drive before, %.2f GB fetched "
                   "in %.1f s; %lld of %lld files checked against what the source publishes (sha256 or block sums)\n",
                   a.dir.c_str(), r.source.c_str(), r.bytes / 1e9, r.local_bytes / 1e9, r.fetched_bytes / 1e9,
                   r.seconds, static_cast<long long>(r.verified), static_cast<long long>(r.files));
  }
  return 0;
}

}  // namespace

void register_upgrade(CLI::App& app, Action& run) {
  auto a = std::make_shared<UpgradeArgs>();
  CLI::App* cmd = app.add_subcommand("upgrade", "Complete a streaming install: fetch everything not on the drive yet");
  cmd->add_option("dir", a->dir, "The streaming install (strata pull --streaming)")->required();
  cmd->add_flag("--full", a->full,
                "Fetch every byte not on the drive yet (keeping what was fetched), check each file against its "
                "published sha256 or block sums; then the install needs no network");
  cmd->add_option("--connections", a->connections, "Ranges fetched at once")->check(CLI::Range(1, 64))->capture_default_str();
  cmd->add_option("--max-rate", a->max_rate_mb, "At most this many MB a second (0: no limit)")
      ->check(number_in(0.0, 1e6))
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "Print one JSON object with what was done");
  cmd->add_flag("-q,--quiet", a->quiet, "No progress bar");
  cmd->callback([&run, a] { run = [a] { return run_upgrade(*a); }; });
}

}  // namespace strata::cli
