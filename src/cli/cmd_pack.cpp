// strata pack: an HF directory or GGUF file -> trunk + per-drive expert blobs
// + manifest (see pack/packer.h). A lossy pack (--trunk int8, --experts ...)
// is then measured against its source on the built-in prompts and the
// figures recorded in its manifest (runtime/pack_fidelity.h), unless
// --skip-fidelity, which is recorded instead.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "pack/packer.h"
#include "runtime/pack_fidelity.h"
#include "util/progress.h"
#include "util/error.h"

namespace strata::cli {

namespace {

struct PackArgs {
  std::string source, out, trunk = "keep", experts = "keep", trace, probe;
  std::vector<std::string> drives;
  bool json = false, quiet = false, skip_fidelity = false;
  int threads = 0;
};

int run_pack(const PackArgs& a) {
  PackOptions o;
  o.source = a.source;
  o.out = a.out;
  for (const auto& d : a.drives) o.drives.emplace_back(d);
  o.trunk = a.trunk;
  o.experts = a.experts;
  o.trace = a.trace;
  o.probe = a.probe;
  o.progress = !a.quiet && !a.json;
  if (!a.quiet) o.notice = [](const std::string& line) { std::fprintf(stderr, "pack: %s\n", line.c_str()); };
  const PackReport r = pack_model(o);
  if (!a.json) {
    if (r.already_packed)
      std::fprintf(stderr, "%s is already packed from %s with these options\n", a.out.c_str(), a.source.c_str());
    else
      std::fprintf(stderr, "packed %s -> %s: trunk %.2f GB, experts %.2f GB on %zu drive(s)%s in %.1f s\n",
                   a.source.c_str(), a.out.c_str(), r.trunk_bytes / 1e9, r.expert_bytes / 1e9, r.drive_weights.size(),
                   r.layers_resumed ? (" (resumed after " + std::to_string(r.layers_resumed) + " layers)").c_str() : "",
                   r.seconds);
  }
  const PackLossy lossy = PackLossy::from_options(a.trunk, a.experts);
  if (lossy.any() && !a.skip_fidelity && !r.already_packed && !a.quiet && !a.json)
    std::fprintf(stderr, "pack: measuring the pack against the source (--skip-fidelity skips this)\n");
  FidelityOptions fo;
  fo.threads = a.threads;
  fo.skip = a.skip_fidelity;
  fo.show_progress = !a.quiet && !a.json && stderr_is_terminal();
  const std::optional<PackFidelity> fidelity = record_pack_fidelity(a.source, a.out, fo);
  if (a.json) {
    std::cout << nlohmann::json{{"out", a.out},
                                {"already_packed", r.already_packed},
                                {"restarted", r.restarted},
                                {"trunk_bytes", r.trunk_bytes},
                                {"expert_bytes", r.expert_bytes},
                                {"layers_resumed", r.layers_resumed},
                                {"drive_weights", r.drive_weights},
                                {"probe", r.probe},
                                {"seconds", r.seconds},
                                {"lossy", lossy.any() ? lossy_json(lossy) : nlohmann::json()},
                                {"fidelity", fidelity ? fidelity_json(*fidelity) : nlohmann::json()},
                                {"approximation", approximation_label(lossy, fidelity)}}
                     .dump()
              << "\n";
    return 0;
  }
  // The label every output of the pack will carry, heard first here.
  if (lossy.any()) std::fprintf(stderr, "pack: %s\n", approximation_label(lossy, fidelity).c_str());
  return 0;
}

}  // namespace

void register_pack(CLI::App& app, Action& run) {
  auto a = std::make_shared<PackArgs>();
  CLI::App* cmd = app.add_subcommand("pack", "Pack a model for streaming: trunk + per-drive expert blobs + manifest");
  add_model_argument(cmd, a->source, "HF model directory (config.json + safetensors) or GGUF file to pack");
  cmd->add_option("--out", a->out, "Pack directory (trunk and manifest; expert files too without --drive)")->required();
  cmd->add_option("--drive", a->drives,
                  "Directory on a drive to hold expert blobs (repeat for several drives; folders on one device "
                  "share it)");
  cmd->add_option("--trunk", a->trunk, "keep, or int8 (int8 matrices with per-row scales; Q8_0 for GGUF)")
      ->check(CLI::IsMember({"keep", "int8"}))
      ->capture_default_str();
  cmd->add_option("--experts", a->experts, "keep, or re-quantize to q8, int4 or mxfp4")
      ->check(CLI::IsMember({"keep", "q8", "int4", "mxfp4"}))
      ->capture_default_str();
  cmd->add_option("--trace", a->trace, "Expert heat (JSON, e.g. from a run's heat file) to place hot experts");
  cmd->add_option("--probe", a->probe,
                  "Drive speeds from `strata probe` (default: the saved probe; when it does not cover every device "
                  "the --drive folders are on, a short probe is measured)");
  cmd->add_flag("--skip-fidelity", a->skip_fidelity,
                "With --trunk int8 or --experts: do not measure the pack against the source on the built-in prompts "
                "(the manifest records that it was skipped)");
  add_threads_option(cmd, a->threads, "Worker threads for the fidelity measurement (default: all cores)");
  cmd->add_flag("--json", a->json, "Print one JSON object with what was written");
  cmd->add_flag("-q,--quiet", a->quiet, "No progress bar or notes");
  cmd->callback([&run, a] { run = [a] { return run_pack(*a); }; });
}

}  // namespace strata::cli
