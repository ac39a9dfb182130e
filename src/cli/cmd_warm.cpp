// strata warm: a streaming install's likeliest experts fetched ahead
// (runtime/install_warmup.h).
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "runtime/install_warmup.h"
#include "util/error.h"

namespace strata::cli {

namespace {

struct WarmArgs {
  std::string dir;
  std::vector<std::string> from;
  double budget_gb = 0, max_rate_mb = 0;
  int connections = 4;
  bool json = false, quiet = false;
};

int run_warm(const WarmArgs& a) {
  InstallWarmupOptions o;
  o.dir = a.dir;
  for (const auto& f : a.from) o.from.emplace_back(f);
  o.budget_bytes = static_cast<uint64_t>(a.budget_gb * 1e9);
  o.max_rate = a.max_rate_mb * 1e6;
  o.connections = a.connections;
  o.progress = !a.quiet && !a.json;
  const InstallWarmupReport r = warm_install(o);
  if (a.json) {
    std::cout << nlohmann::json{{"dir", a.dir},
                                {"heat", r.heat},
                                {"ranked", r.ranked},
                                {"already_local", r.already_local},
                                {"warmed", r.warmed},
                                {"fetched_bytes", r.fetched_bytes},
                                {"budget_reached", r.budget_reached},
                                {"seconds", r.seconds}}
                     .dump()
              << "\n";
  } else if (!a.quiet) {
    std::fprintf(stderr,
                 "warmed %s from %s: %lld experts fetched (%.3f GB in %.1f s), %lld already on the drive, of %lld "
                 "ranked%s\n",
                 a.dir.c_str(), r.heat.c_str(), static_cast<long long>(r.warmed), r.fetched_bytes / 1e9, r.seconds,
                 static_cast<long long>(r.already_local), static_cast<long long>(r.ranked),
                 r.budget_reached ? "; the budget ended it" : "");
  }
  return 0;
}

}  // namespace

void register_warm(CLI::App& app, Action& run) {
  auto a = std::make_shared<WarmArgs>();
  CLI::App* cmd = app.add_subcommand("warm", "Fetch a streaming install's likeliest experts ahead, hottest first");
  cmd->add_option("dir", a->dir, "The streaming install (strata pull --streaming)")->required();
  cmd->add_option("--from", a->from,
                  "Router traces (generate/serve --trace) or heat files to rank experts by (default: the install's "
                  "own heat from earlier runs)");
  cmd->add_option("--budget", a->budget_gb, "Fetch at most this many GB (0: every ranked expert)")
      ->check(number_in(0.0, 1e6))
      ->capture_default_str();
  cmd->add_option("--max-rate", a->max_rate_mb, "At most this many MB a second (0: no limit)")
      ->check(number_in(0.0, 1e6))
      ->capture_default_str();
  cmd->add_option("--connections", a->connections, "Ranges fetched at once")->check(CLI::Range(1, 64))->capture_default_str();
  cmd->add_flag("--json", a->json, "Print one JSON object with what was done");
  cmd->add_flag("-q,--quiet", a->quiet, "No progress bar");
  cmd->callback([&run, a] { run = [a] { return run_warm(*a); }; });
}

}  // namespace strata::cli
