// strata demo: the README's main job. First use synthesizes a Kimi-K3-shaped
// model of a few GB (random weights, the published layout: bf16 trunk,
// compressed-tensors MXFP4 experts) into a cache directory and packs it; every use then runs it under
// a RAM budget well below the model's size, experts streamed cold from the
// drive, and reports tokens/s, expert GB/s, the drive's probed ceiling and
// the ratio of the two. No download needed.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "model/model.h"
#include "runtime/drive_rate_log.h"
#include "runtime/loader.h"
#include "pack/manifest.h"
#include "pack/packer.h"
#include "runtime/expert_stats.h"
#include "runtime/generator.h"
#include "storage/aligned_buffer.h"
#include "storage/probe.h"
#include "storage/storage.h"
#include "synth/synth.h"
#include "tokenizer/tokenizer.h"
#include "util/cache_dir.h"
#include "util/error.h"
#include "util/progress.h"

namespace strata::cli {

namespace {

namespace fs = std::filesystem;

struct DemoArgs {
  std::string dir;
  double size_gb = 3.0;
  double ram_gib = 0;
  int tokens = 24;
  int threads = 0;
  bool json = false;
  std::string prompt = "The drives are the only limit:";
};

fs::path default_demo_dir() { return strata_cache_dir() / "demo"; }

void say(bool quiet, const std::string& line) {
  if (!quiet) std::fprintf(stderr, "%s\n", line.c_str());
}

fs::path pack_path(const fs::path& dir, double size_gb) {
  char tag[32];
  std::snprintf(tag, sizeof tag, "kimi-k3-%.1fgb", size_gb);
  return dir / (std::string(tag) + ".pack");
}

// The model: synthesized once, packed once; later runs reuse the pack.
void make_pack(const fs::path& dir, double size_gb, bool quiet) {
  const fs::path pack = pack_path(dir, size_gb);
  const std::string tag = pack.stem().string();
  fs::create_directories(dir);
  const fs::path source = dir / (std::string(tag) + ".hf");
  if (!fs::exists(source / "config.json")) {
    say(quiet, "demo: synthesizing a " + std::to_string(size_gb).substr(0, 4) +
                   " GB Kimi-K3-shaped model (random weights, bf16 trunk, MXFP4 experts) in " + dir.string());
    synth::Request r;
    r.preset = "kimi-k3";
    r.format = synth::Format::Safetensors;
    r.size_gb = size_gb;
    r.quant = "mxfp4";
    r.seed = 1;
    synth::WriteOptions o;
    o.progress = !quiet;
    o.force = true;  // an interrupted earlier attempt
    synth::write(synth::make_plan(r), source, o);
  }
  say(quiet, "demo: packing it (trunk + 4 KiB-aligned expert blobs with checksums)");
  PackOptions p;
  p.source = source;
  p.out = pack;
  p.progress = !quiet;
  pack_model(p);
  // The pack holds everything now; the source would only double the disk use.
  std::error_code ec;
  fs::remove_all(source, ec);
}

// Synthesis and packing map the whole source model; done in this process
// they would count against its peak RSS, which the report compares with the
// budget. A child process does them instead.
fs::path ensure_pack(const fs::path& dir, double size_gb, bool quiet) {
  const fs::path pack = pack_path(dir, size_gb);
  if (fs::exists(pack / "manifest.json")) return pack;
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("cannot fork: ") + std::strerror(errno));
  if (pid == 0) {
    int rc = 0;
    try {
      make_pack(dir, size_gb, quiet);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata: error: %s\n", e.what());
      rc = 1;
    }
    std::fflush(nullptr);
    ::_exit(rc);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw Error("demo: preparing the model failed (see above)");
  return pack;
}

// The drives' ceiling for the reads of an expert, measured now on the pack's own
// expert files (nothing is written): a short probe right before and right
// after the run. Virtual and shared disks drift by 2x over minutes, so a saved
// probe from another hour would make the ratio meaningless. The first
// measurement is saved for later tools when no saved probe covers the drives.
struct Ceiling {
  double gbps = 0;   // the best rate of the probe
  std::string name;  // the drive, or "all" for several
};

Ceiling probe_ceiling(const Manifest& manifest, const fs::path& pack, uint64_t blob_bytes, bool save_if_new) {
  ProbeOptions o;
  for (uint32_t d = 0; d < manifest.drives.size(); ++d) o.paths.push_back(manifest.drive_file(pack, d).string());
  // The reads the run issues: an expert's pieces (whole 4 KiB pages), at 4
  // and at the storage's 16 in flight; the ceiling is the better of the two.
  o.blocks = {piece_length(align_up(blob_bytes), StorageOptions{}.piece_bytes)};
  o.depths = {4, StorageOptions{}.queue_depth};
  o.seconds = 1.0;
  o.rounds = 2;
  ProbeResult r = run_probe(o);
  if (save_if_new) {
    // Only a convenience for later tools (pack reads it): never a reason to fail the demo.
    try {
      const auto saved = load_probe();
      bool covered = saved.has_value();
      for (const auto& path : o.paths) covered = covered && saved->drive_for(path) != nullptr;
      if (!covered) save_probe(r, default_probe_path());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "demo: note: the probe was not saved (%s)\n", e.what());
    }
  }
  return {r.combined.best_gbps, r.drives.size() == 1 ? r.drives[0].name : r.combined.name};
}

int run_demo(const DemoArgs& a) {
  if (!(a.size_gb >= 0.2 && a.size_gb <= 1000)) throw Error("--size must be between 0.2 and 1000 GB");
  if (a.tokens < 2) throw Error("--tokens must be at least 2");
  if (a.ram_gib != 0) ram_gib_bytes(a.ram_gib);  // 0: the default; else as generate's --ram
  const bool quiet = a.json;
  const fs::path dir = a.dir.empty() ? default_demo_dir() : fs::path(a.dir);
  const fs::path pack = ensure_pack(dir, a.size_gb, quiet);
  const Manifest manifest = Manifest::load(pack);
  uint64_t expert_bytes = 0, blob = 0;
  for (const auto& d : manifest.drives) expert_bytes += d.bytes;
  for (const auto& layer : manifest.experts)
    for (const auto& e : layer) blob = std::max(blob, e.length);
  uint64_t trunk_bytes = 0;
  // trunk.gguf, or trunk/ (safetensors) for an HF source.
  for (const auto& e : fs::recursive_directory_iterator(pack))
    if (e.is_regular_file() && e.path().filename() != "manifest.json" &&
        e.path().filename().string().rfind("strata-experts-", 0) != 0)
      trunk_bytes += e.file_size();
  say(quiet, "demo: measuring the drive's read ceiling on the expert file (strata probe, short form)");
  const Ceiling before = probe_ceiling(manifest, pack, blob, true);

  // A budget well below the model: the trunk, buffers, and room for about a
  // fifth of the experts (never more than 60% of the model), but never below
  // the least the loader can run it in (its own accounting: at small sizes
  // the trunk and the step's buffers alone are more than 60% of the model).
  LoadOptions lo;
  lo.threads = a.threads;
  lo.context = 512;
  lo.raise_ram_to_least = a.ram_gib <= 0;
  lo.show_progress = !quiet && stderr_is_terminal();
  lo.notice = [quiet](const std::string& line) { say(quiet, "demo: " + line); };
  const uint64_t model_bytes = trunk_bytes + expert_bytes;
  lo.ram_bytes = a.ram_gib > 0 ? static_cast<uint64_t>(a.ram_gib * (1ull << 30))
                               : std::min<uint64_t>(trunk_bytes + (256ull << 20) + expert_bytes / 5, model_bytes * 3 / 5);
  auto tok = Tokenizer::for_model(pack);  // first: the budget's baseline counts it
  auto model = load_model(pack, lo);
  const std::vector<int32_t> prompt = tok ? tok->encode_prompt(a.prompt) : std::vector<int32_t>{1, 2, 3, 4};
  GenerateOptions g;
  g.max_new_tokens = a.tokens;
  g.sampling = {1.0f, 42};  // sampled, so routing varies as in real text
  GenerateResult r = generate(*model, prompt, g);
  const int64_t peak_rss = peak_rss_bytes();  // before the second probe adds its buffers
  if (const std::string why = model->save_heat(); !why.empty())
    say(quiet, "demo: warning: " + why + " (the next run starts without this run's expert heat)");
  if (const std::string why = record_drive_rates(r.prefill_experts, r.decode_experts); !why.empty())
    say(quiet, "demo: warning: " + why + " (budget rates the drives without this run's reads)");
  say(quiet, "demo: measuring the drive's read ceiling again");
  const Ceiling after = probe_ceiling(manifest, pack, blob, false);
  const double ceiling = (before.gbps + after.gbps) / 2;
  const std::string& drive_name = before.name;

  const ExpertStats& d = r.decode_experts;
  const double decode_tok_s = r.decode_s > 0 ? (r.tokens.size() - 1) / r.decode_s : 0;
  const double busy = d.drives.empty() ? 0 : d.drives[0].busy_s;
  double drive_gbps = 0;
  for (const auto& x : d.drives) drive_gbps += x.busy_s > 0 ? x.bytes / 1e9 / x.busy_s : 0;
  const double wall_gbps = r.decode_s > 0 ? d.bytes_read / 1e9 / r.decode_s : 0;
  const MemoryPlan& plan = model->memory_plan();
  if (a.json) {
    nlohmann::json j = {{"model", pack.string()},
                        {"model_bytes", model_bytes},
                        {"ram_budget_bytes", plan.budget},
                        {"peak_rss_bytes", peak_rss},
                        {"prompt_tokens", prompt.size()},
                        {"generated_tokens", r.tokens.size()},
                        {"ttft_s", r.prefill_s},
                        {"decode_tok_s", decode_tok_s},
                        {"expert_gbps_wall", wall_gbps},
                        {"expert_gbps_while_reading", drive_gbps},
                        {"drive", drive_name},
                        {"probed_gbps", ceiling},
                        {"probed_gbps_before", before.gbps},
                        {"probed_gbps_after", after.gbps},
                        {"ratio", ceiling > 0 ? drive_gbps / ceiling : 0},
                        {"ratio_wall", ceiling > 0 ? wall_gbps / ceiling : 0},
                        {"experts", expert_stats_json(d, r.decode_s)}};
    std::cout << j.dump() << "\n";
    return 0;
  }
  if (tok) std::printf("%s%s\n", a.prompt.c_str(), tok->decode(r.tokens).c_str());
  std::printf("\nmodel            %.2f GB (trunk %.2f GB, experts %.2f GB), Kimi-K3-shaped, random weights\n",
              model_bytes / 1e9, trunk_bytes / 1e9, expert_bytes / 1e9);
  std::printf("RAM budget       %.2f GB (%.0f%% of the model); peak RSS %.2f GB\n", plan.budget / 1e9,
              100.0 * plan.budget / model_bytes, peak_rss / 1e9);
  std::printf("first token      %.2f s for %zu prompt tokens\n", r.prefill_s, prompt.size());
  std::printf("decode           %.2f tokens/s over %zu tokens (sampled, temperature 1)\n", decode_tok_s,
              r.tokens.size() - 1);
  std::printf("experts          %.2f GB read, %.0f%% cache hits, %.0f%% of decode waiting on reads\n",
              d.bytes_read / 1e9, d.requests ? 100.0 * d.hits / d.requests : 0.0,
              r.decode_s > 0 ? 100.0 * d.io_wait_s / r.decode_s : 0.0);
  std::printf("expert reads     %.2f GB/s while reading (%.2f GB/s over all of decode, %.0f%% of it reading)\n",
              drive_gbps, wall_gbps, r.decode_s > 0 ? 100.0 * busy / r.decode_s : 0.0);
  std::printf("drive ceiling    %.2f GB/s (%s, strata probe on the expert file: %.2f before, %.2f after the run)\n",
              ceiling, drive_name.c_str(), before.gbps, after.gbps);
  std::printf("ratio            %.2f of the probed ceiling while reading (%.2f over all of decode)\n",
              ceiling > 0 ? drive_gbps / ceiling : 0.0, ceiling > 0 ? wall_gbps / ceiling : 0.0);
  return 0;
}

}  // namespace

void register_demo(CLI::App& app, Action& run) {
  auto a = std::make_shared<DemoArgs>();
  CLI::App* cmd = app.add_subcommand(
      "demo", "Synthesize (once) a Kimi-K3-shaped model, pack it, and run it with experts streamed under a RAM budget");
  cmd->add_option("--dir", a->dir, "Where the demo model lives (default ~/.cache/strata/demo, or $STRATA_HOME/demo)");
  cmd->add_option("--size", a->size_gb, "Model size in GB (0.2 to 1000)")->capture_default_str();
  cmd->add_option("--ram", a->ram_gib,
                  "RAM budget in GiB (default: trunk + a fifth of the experts, at most 60% of the model, at least the "
                  "least that runs it)");
  cmd->add_option("--tokens", a->tokens, "Tokens to generate")->capture_default_str();
  cmd->add_option("--prompt", a->prompt, "Prompt text")->capture_default_str();
  add_threads_option(cmd, a->threads);
  cmd->add_flag("--json", a->json, "Print one JSON object instead of the report");
  cmd->callback([&run, a] { run = [a] { return run_demo(*a); }; });
}

}  // namespace strata::cli
