#pragma once
// `strata bench`: the honest cold-run harness. For each configuration (a
// RAM budget) and each of `runs` rounds, in balanced order (the rounds go
// forwards and backwards over the configurations in turn, so that a drift of
// the machine favours none):
//   1. sync and drop the page cache where allowed (root), saying so where not;
//   2. probe the drives the experts are read from (short O_DIRECT reads of
//      the size and depth the run reads an expert at: expert_read_bytes), so
//      the run is judged against the drives' rate at that moment;
//   3. load the model cold and run a fixed prompt (time to first token),
//      then `tokens` decode steps (steady decode, timed apart);
//   4. probe the drives again.
// Medians and ranges per configuration; the report records the machine, the
// commit, the model, each budget, the cache state, the numeric mode, the
// prompt and output tokens. Written as JSON, a Markdown summary and SVG
// charts (bench_json, bench_markdown, bench_svg).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/loader.h"

namespace strata {

struct BenchOptions {
  std::filesystem::path model;
  // One configuration per budget (bytes; nullopt: the loader's default).
  std::vector<std::optional<uint64_t>> rams = {std::nullopt};
  int runs = 3;
  int64_t prompt_tokens = 512;  // ids 1000 + 37·i (mod the vocabulary)
  int tokens = 32;              // decoded after the first, greedy, end-of-sequence ignored
  LoadOptions load;             // everything but ram_bytes
  double probe_seconds = 0.5;   // each probe around a run (0: none)
  bool drop_caches = true;      // try to; the report says whether it could
  std::string commit;           // the build's, for the log
  std::function<void(const std::string&)> progress;
};

struct BenchRun {
  int config = 0;        // index into BenchOptions::rams
  int round = 0;
  std::string cache;     // "dropped", or why not
  double load_s = 0, ttft_s = 0, decode_tok_s = 0;
  double probe_before_gbps = 0, probe_after_gbps = 0;  // 0: not probed
  nlohmann::json stats;  // generate's figures: prompt/output tokens, memory plan, expert streaming
};

struct BenchReport {
  nlohmann::json header;  // machine, commit, model, settings
  std::vector<std::string> labels;  // per configuration ("--ram 4", "default")
  std::vector<BenchRun> runs;       // in the order they ran
};

// Throws strata::Error for a model that cannot be opened or bad options.
BenchReport run_bench(const BenchOptions& options);

nlohmann::json bench_json(const BenchReport& report);      // header, runs, per-configuration summary
std::string bench_markdown(const BenchReport& report);     // a table of medians [min–max] and the header
// "decode" (tok/s) or "ttft" (s): one bar per configuration at its median,
// a whisker from its least to its largest run.
std::string bench_svg(const BenchReport& report, const std::string& figure);

}  // namespace strata
