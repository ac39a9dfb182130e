#include "cli/model_flags.h"

#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "util/error.h"
#include "util/progress.h"

namespace strata::cli {

void add_model_argument(CLI::App* cmd, std::string& model, const std::string& help) {
  cmd->add_option("MODEL,--model", model, help)->required();
}

void add_model_flags(CLI::App* cmd, ModelFlags& f) {
  add_threads_option(cmd, f.threads);
  cmd->add_option("--device", f.device,
                  "Where to compute: cpu, vulkan (the best Vulkan device), vulkan:N (strata devices lists them), "
                  "or auto (a Vulkan GPU when there is one, else the CPU, saying so)")
      ->capture_default_str();
  cmd->add_option("--vram", f.vram_gib,
                  "With a GPU (--device): GiB of its memory for the routed-expert cache (default: half of it on "
                  "a GPU with its own memory, none on a CPU Vulkan driver)");
  cmd->add_option("--ram", f.ram_gib,
                  "RAM budget in GiB for the whole process (trunk + KV + buffers + expert cache); "
                  "experts beyond it are streamed from the drives. Default: the model runs in RAM when it fits in "
                  "the memory available, else its experts are streamed within a budget derived from that memory");
  cmd->add_flag("--stream", f.stream, "Stream routed experts from the drives even without --ram");
  cmd->add_option("--cache-experts", f.cache_experts, "Expert cache size in experts (overrides what --ram allows)");
  cmd->add_option("--ctx", f.ctx,
                  "Context length the KV cache is budgeted for (default: 4096, or the model's "
                  "max_position_embeddings if smaller)");
  cmd->add_option("--prefill-pass", f.prefill_pass,
                  "Rows of one prompt pass: a streamed layer's experts are read once a pass (default: under a "
                  "budget, up to --ctx as its share allows; 1: one step at a time)");
  cmd->add_flag("--allow-long-ctx", f.allow_long_ctx,
                "Allow --ctx beyond the model's max_position_embeddings (positions it was never trained for)");
  cmd->add_option("--prefetch", f.prefetch, "Next-layer expert prefetch: auto, on or off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd->add_option("--verify", f.verify,
                  "Expert checksums (packed models): first (each blob as it first lands in memory: every read "
                  "from a drive), always (cache hits too, before each use), or off")
      ->check(CLI::IsMember({"first", "always", "off"}))
      ->capture_default_str();
  cmd->add_flag("--no-verify", f.no_verify, "Same as --verify off: no checksums (blob headers are still checked)");
  cmd->add_option("--heat", f.heat, "Expert heat file kept between runs (default: ~/.cache/strata/heat/...; none)");
  cmd->add_option("--io", f.io, "Read backend: io_uring or pread (default: $STRATA_IO or io_uring)")
      ->check(CLI::IsMember({"io_uring", "pread"}));
  cmd->add_option("--profile", f.profile,
                  "The tuned profile (strata tune) for what no flag sets: a path, or none (default: this "
                  "machine's, when there is one)");
  cmd->add_option("--io-depth", f.io_depth,
                  "Expert reads (pieces of about 1 MiB) in flight per drive (default 16; `strata probe` shows the "
                  "depth at which a drive reads fastest)");
}

uint64_t ram_gib_bytes(double gib) {
  // (Below a byte would be 0, which means no budget at all.)
  if (!std::isfinite(gib) || gib * (1ull << 30) < 1 || gib > (1 << 20))
    throw Error("--ram must be a number of GiB above 0");
  return static_cast<uint64_t>(gib * (1ull << 30));
}

std::optional<TunedProfile> tuned_profile(const std::string& flag) {
  if (flag == "none") return std::nullopt;
  const std::filesystem::path path = flag.empty() ? default_profile_path() : std::filesystem::path(flag);
  if (!flag.empty() && !std::filesystem::exists(path)) throw Error("--profile " + flag + ": no such file");
  std::optional<TuneProfile> p = load_profile(path, machine_key());
  if (!p) return std::nullopt;
  return TunedProfile{std::move(*p), path};
}

LoadOptions load_options(const ModelFlags& f) {
  if (f.ctx && *f.ctx < 1) throw Error("--ctx must be at least 1");
  if (f.prefill_pass && *f.prefill_pass < 1) throw Error("--prefill-pass must be at least 1");
  LoadOptions o;
  o.threads = f.threads;
  o.device = parse_device(f.device);
  if (f.vram_gib) {
    if (!std::isfinite(*f.vram_gib) || *f.vram_gib < 0 || *f.vram_gib > (1 << 20))
      throw Error("--vram must be a number of GiB, 0 or more");
    if (o.device.kind == ComputeDevice::Kind::Cpu) throw Error("--vram needs a GPU: --device vulkan or auto");
    o.device.vram_bytes = static_cast<int64_t>(*f.vram_gib * 1024.0 * 1024.0 * 1024.0);
  }
  o.stream = f.stream;
  if (f.ram_gib) o.ram_bytes = ram_gib_bytes(*f.ram_gib);
  o.cache_slots = f.cache_experts;
  o.context = f.ctx.value_or(0);
  o.allow_long_context = f.allow_long_ctx;
  o.max_pass = f.prefill_pass.value_or(0);
  o.prefetch = f.prefetch == "on"    ? LoadOptions::Prefetch::On
               : f.prefetch == "off" ? LoadOptions::Prefetch::Off
                                     : LoadOptions::Prefetch::Auto;
  o.verify = f.no_verify || f.verify == "off" ? LoadOptions::Verify::Off
             : f.verify == "always"           ? LoadOptions::Verify::Always
                                              : LoadOptions::Verify::First;
  o.heat = f.heat;
  o.io_backend = f.io;
  if (f.io_depth) {
    if (*f.io_depth < 1 || *f.io_depth > 1024) throw Error("--io-depth must be between 1 and 1024");
    o.io_depth = static_cast<unsigned>(*f.io_depth);
  }
  o.notice = [](const std::string& line) { std::fprintf(stderr, "strata: %s\n", line.c_str()); };
  o.show_progress = stderr_is_terminal();
  if (const std::optional<TunedProfile> t = tuned_profile(f.profile)) {
    apply_profile(t->profile, t->path, o);
    o.notice("tuned profile " + t->path.string() + " (" + describe_profile(t->profile) +
             "; flags given take precedence, --profile none ignores it)");
  }
  return o;
}

}  // namespace strata::cli
