#pragma once
// What every command that reads a model shares: the model argument (a
// positional MODEL, with --model as an alias, the same in every subcommand),
// and for those that run one (`generate`, `serve`) the flags of threads, the
// context, the RAM budget and the expert-streaming knobs, as the load
// options of runtime/loader.h.
#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>

#include "model/model.h"
#include "runtime/loader.h"
#include "runtime/tune_profile.h"

namespace strata::cli {

// What every model argument accepts (open_checkpoint's three kinds).
inline constexpr const char* kModelKinds = "HF model directory (config.json + safetensors), GGUF file, or pack";

// MODEL (positional) or --model MODEL; required.
void add_model_argument(CLI::App* cmd, std::string& model, const std::string& help);

struct ModelFlags {
  int threads = 0;
  std::string device = "cpu";
  std::optional<double> vram_gib;
  std::optional<double> ram_gib;  // unset: in RAM when the model fits, else a budget from the memory available
  bool stream = false;
  size_t cache_experts = 0;
  std::optional<int64_t> ctx;  // unset: 4096, or the model's max_position_embeddings if smaller
  std::optional<int64_t> prefill_pass;  // unset: the budget's pass (LoadOptions::max_pass)
  bool allow_long_ctx = false;
  std::string prefetch = "auto";
  std::string verify = "first";
  bool no_verify = false;  // = --verify off
  std::string heat;
  std::string io;
  std::optional<int64_t> io_depth;  // unset: StorageOptions' default
  std::string profile;  // "": this machine's tuned profile when there is one; "none"; a path
};

void add_model_flags(CLI::App* cmd, ModelFlags& f);

// A --ram value in GiB as bytes; throws strata::Error unless it is finite,
// above 0 and at most a pebibyte.
uint64_t ram_gib_bytes(double gib);

// The tuned profile a --profile value names ("": this machine's when there
// is one; "none": none; a path that must exist), with where it was read from.
struct TunedProfile {
  TuneProfile profile;
  std::filesystem::path path;
};
std::optional<TunedProfile> tuned_profile(const std::string& flag);
// Throws strata::Error for values out of range, or a tuned profile that
// cannot be used (runtime/tune_profile.h; applied where no flag was given,
// and named on stderr). The loader's notices go to
// stderr as one line each; its "load" progress bar shows when stderr is a
// terminal (commands printing --json turn it off).
LoadOptions load_options(const ModelFlags& f);

}  // namespace strata::cli
