// strata pull: a model from a hub, an HTTP(S) server or an S3-compatible
// store installed as a pack (pack/pull.h).
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "pack/pull.h"
#include "runtime/install_warmup.h"
#include "util/error.h"

namespace strata::cli {

namespace {

struct PullArgs {
  std::string source, out, probe;
  std::vector<std::string> drives;
  bool full = false, streaming = false, json = false, quiet = false;
  int connections = 4;
  double local_share = 0;
  std::vector<std::string> local_from;
};

int run_pull(const PullArgs& a) {
  if (a.full == a.streaming) throw Error("pull: choose --full (every weight fetched and packed) or --streaming");
  if (!a.streaming && (a.local_share > 0 || !a.local_from.empty()))
    throw Error("pull: --local-share and --local-from go with --streaming");
  if (!a.local_from.empty() && a.local_share <= 0) throw Error("pull: --local-from ranks experts for --local-share");
  if (a.streaming && (!a.drives.empty() || !a.probe.empty()))
    throw Error("pull: --drive and --probe place a pack's experts; a streaming install keeps the source's files");
  PullOptions o;
  o.source = a.source;
  o.out = a.out;
  for (const auto& d : a.drives) o.drives.emplace_back(d);
  o.probe = a.probe;
  o.connections = a.connections;
  o.progress = !a.quiet && !a.json;
  if (!a.quiet) o.notice = [](const std::string& line) { std::fprintf(stderr, "pull: %s\n", line.c_str()); };
  const PullReport r = a.full ? pull_full(o) : pull_streaming(o);
  // A first share of the experts at install: the hottest where traces or
  // heat are given, else layer by layer (runtime/install_warmup.h).
  InstallWarmupReport first;
  if (a.local_share > 0) {
    InstallWarmupOptions w;
    w.dir = a.out;
    for (const auto& f : a.local_from) w.from.emplace_back(f);
    w.budget_share = a.local_share;
    w.any_order_without_heat = true;
    w.connections = a.connections;
    w.progress = o.progress;
    first = warm_install(w);
  }
  if (a.json) {
    std::cout << nlohmann::json{{"out", a.out},
                                {"source", r.source},
                                {"commit", r.commit},
                                {"files", r.files},
                                {"bytes", r.bytes},
                                {"fetched_bytes", r.fetched_bytes + first.fetched_bytes},
                                {"local_share_experts", first.warmed + first.already_local},
                                {"already_pulled", r.already_pulled},
                                {"layers_resumed", r.pack.layers_resumed},
                                {"trunk_bytes", r.pack.trunk_bytes},
                                {"expert_bytes", r.pack.expert_bytes},
                                {"seconds", r.seconds}}
                     .dump()
              << "\n";
  } else if (!a.quiet) {
    if (r.already_pulled)
      std::fprintf(stderr, "%s already holds %s, unchanged at the source\n", a.out.c_str(), r.source.c_str());
    else
      std::fprintf(stderr, "pulled %s -> %s: %lld files, %.2f GB (%.2f GB fetched now), packed in %.1f s\n",
                   r.source.c_str(), a.out.c_str(), static_cast<long long>(r.files), r.bytes / 1e9,
                   r.fetched_bytes / 1e9, r.seconds);
  }
  return 0;
}

}  // namespace

void register_pull(CLI::App& app, Action& run) {
  auto a = std::make_shared<PullArgs>();
  CLI::App* cmd = app.add_subcommand("pull", "Install a model from a hub, an HTTP(S) server or S3 as a pack");
  cmd->add_option("source", a->source,
                  "hf://ORG/REPO[@REVISION] (HF_ENDPOINT, HF_TOKEN), http(s)://URL of the model folder, or "
                  "s3://BUCKET/PREFIX (AWS credentials, AWS_ENDPOINT_URL_S3)")
      ->required();
  cmd->add_option("--out", a->out, "Pack directory to install into (a re-run resumes there)")->required();
  cmd->add_flag("--full", a->full, "Fetch every weight and pack it as it arrives (a safetensors source's bytes are freed layer by layer)");
  cmd->add_flag("--streaming", a->streaming,
                "Fetch the config, tokenizer and trunk; routed experts are fetched by range as decoding first needs "
                "them, into the install, and read from the drive ever after");
  cmd->add_option("--local-share", a->local_share,
                  "With --streaming: fetch this share (0-1) of the experts' bytes at install, the hottest first "
                  "where --local-from gives traces or heat, else layer by layer")
      ->check(number_in(0.0, 1.0));
  cmd->add_option("--local-from", a->local_from, "Router traces or heat files that rank experts for --local-share");
  cmd->add_option("--drive", a->drives, "Directory on a drive to hold expert blobs (repeat for several drives)");
  cmd->add_option("--probe", a->probe, "Drive speeds from `strata probe` (as for pack)");
  cmd->add_option("--connections", a->connections, "Files fetched at once, one connection each")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "Print one JSON object with what was done");
  cmd->add_flag("-q,--quiet", a->quiet, "No progress bar or notes");
  cmd->callback([&run, a] { run = [a] { return run_pull(*a); }; });
}

}  // namespace strata::cli
