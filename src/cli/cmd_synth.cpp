// strata synth: write a random-weight checkpoint of any size in the real
// formats (docs/synth.md).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "synth/synth.h"
#include "util/error.h"

namespace strata::cli {

namespace {

struct SynthArgs {
  std::string arch, preset, config, format, out, quant, tokenizer;
  std::optional<double> size;
  std::optional<int64_t> layers, experts, hidden, vocab;
  uint64_t seed = 0;
  int threads = 0;
  bool progress = false, dry_run = false, json = false, force = false, legacy_mla = false, list = false;
};

int run_synth(const SynthArgs& a) {
  if (a.list) {
    for (const synth::Preset& p : synth::presets())
      std::printf("%-16s %-12s %s\n", p.name.c_str(), arch_name(p.arch), p.description.c_str());
    return 0;
  }
  synth::Request r;
  if (!a.arch.empty()) {
    r.arch = synth::arch_from_name(a.arch);
    if (!r.arch) throw Error("--arch '" + a.arch + "' is not one of deepseek_v3, qwen3_moe, gpt_oss");
  }
  if (a.preset.empty() && a.config.empty())
    throw Error("give --preset NAME or --config FILE (--list-presets shows the presets)");
  if (!a.config.empty() && !r.arch) throw Error("--config needs --arch");
  r.preset = a.preset;
  r.config_file = a.config;
  r.size_gb = a.size;
  if (a.format == "safetensors")
    r.format = synth::Format::Safetensors;
  else if (a.format == "gguf")
    r.format = synth::Format::Gguf;
  else
    throw Error("--format must be safetensors or gguf");
  r.quant = a.quant;
  r.seed = a.seed;
  r.tokenizer = a.tokenizer;
  r.layers = a.layers;
  r.experts = a.experts;
  r.hidden = a.hidden;
  r.vocab = a.vocab;
  r.legacy_mla = a.legacy_mla;
  if (a.out.empty() && !a.dry_run) throw Error("--out is required (or use --dry-run)");

  synth::Plan plan = synth::make_plan(r);
  if (a.json && a.dry_run) {
    std::cout << synth::summary_json(plan).dump(2) << "\n";
    return 0;
  }
  if (!a.json) std::cout << synth::describe(plan) << std::flush;
  if (a.dry_run) {
    std::cout << "config.json:\n" << plan.hf_config.dump(2) << "\n";
    return 0;
  }
  synth::WriteOptions o;
  o.threads = a.threads;
  o.progress = a.progress || ::isatty(2) == 1;
  o.force = a.force;
  synth::WriteStats s = synth::write(plan, a.out, o);
  if (a.json) {
    auto j = synth::summary_json(plan);
    j["out"] = a.out;
    j["seconds"] = s.seconds;
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf("wrote %.2f GB to %s in %.1f s (%.0f MB/s)\n", s.bytes / 1e9, a.out.c_str(), s.seconds,
                s.seconds > 0 ? s.bytes / 1e6 / s.seconds : 0.0);
  }
  return 0;
}

}  // namespace

void register_synth(CLI::App& app, Action& run) {
  auto a = std::make_shared<SynthArgs>();
  a->format = "safetensors";
  CLI::App* cmd = app.add_subcommand("synth", "Write a random-weight checkpoint of any size in the real formats");
  cmd->add_option("--arch", a->arch, "deepseek_v3, qwen3_moe or gpt_oss (implied by --preset)");
  cmd->add_option("--preset", a->preset, "Full-size shape to start from (--list-presets)");
  cmd->add_option("--config", a->config, "A config.json to take the full-size shape from (with --arch)");
  cmd->add_option("--size", a->size, "Target size of the weight file(s) in GB (1e9 bytes); shrinks the shape");
  cmd->add_option("--format", a->format, "safetensors (an HF directory) or gguf (one file)")->capture_default_str();
  cmd->add_option("--out", a->out, "Output directory (safetensors) or .gguf file");
  cmd->add_option("--seed", a->seed, "Random seed")->capture_default_str();
  cmd->add_option("--tokenizer", a->tokenizer, "tokenizer.json (or a directory with one) to ship with the model");
  cmd->add_option("--quant", a->quant,
                  "Stored types. safetensors: bf16 (default), f16, f32, fp8, mxfp4 (gpt-oss). gguf: TRUNK[+EXPERTS] "
                  "of f32, f16, bf16, q8_0 (default), q4_k, q6_k, mxfp4, e.g. q8_0+mxfp4");
  cmd->add_option("--layers", a->layers, "Pin the number of layers (--size scales the rest)");
  cmd->add_option("--experts", a->experts, "Pin the number of routed experts per layer");
  cmd->add_option("--hidden", a->hidden, "Pin the hidden size (widths, ranks and heads follow it)");
  cmd->add_option("--vocab", a->vocab,
                  "Pin the synthetic vocabulary's size (default: the base model's, shrunk only for very small sizes)");
  add_threads_option(cmd, a->threads, "Generator threads (default: all cores)");
  cmd->add_flag("--progress", a->progress, "Show the progress bar even when stderr is not a terminal");
  cmd->add_flag("--dry-run", a->dry_run, "Print the resulting config and sizes; write nothing");
  cmd->add_flag("--json", a->json, "Print the summary as JSON");
  cmd->add_flag("--force", a->force, "Overwrite an existing output");
  cmd->add_flag("--legacy-mla", a->legacy_mla,
                "GGUF deepseek2: store attn_kv_b (older converters) instead of attn_k_b + attn_v_b");
  cmd->add_flag("--list-presets", a->list, "List the presets and exit");
  cmd->callback([&run, a] { run = [a] { return run_synth(*a); }; });
}

}  // namespace strata::cli
