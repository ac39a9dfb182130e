// strata bench: runtime/bench_run.h's cold runs of a model under one or
// more budgets; writes bench.json, summary.md, decode.svg and ttft.svg.
#include <cmath>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "runtime/bench_run.h"
#include "storage/atomic_file.h"
#include "strata_commit.h"
#include "util/error.h"
#include "util/utc_time.h"

namespace strata::cli {

namespace {

namespace fs = std::filesystem;

struct BenchArgs {
  std::string model;
  std::vector<double> rams;  // GiB; none: the default budget
  int runs = 3;
  int64_t prompt = 512;
  int tokens = 32;
  std::string out;
  double probe_seconds = 0.5;
  bool no_drop = false;
  ModelFlags flags;  // threads, device, ctx, heat, profile (the rest as generate's defaults)
};

int run_bench_command(BenchArgs a) {
  BenchOptions o;
  o.model = a.model;
  o.runs = a.runs;
  o.prompt_tokens = a.prompt;
  o.tokens = a.tokens;
  if (!std::isfinite(a.probe_seconds) || a.probe_seconds < 0 || a.probe_seconds > 60)
    throw Error("--probe-seconds must be between 0 and 60");
  o.probe_seconds = a.probe_seconds;
  o.drop_caches = !a.no_drop;
  o.commit = STRATA_COMMIT;
  if (!a.rams.empty()) o.rams.clear();
  for (double g : a.rams) o.rams.push_back(ram_gib_bytes(g));
  if (a.flags.heat.empty()) a.flags.heat = "none";  // cold runs: nothing pinned from earlier ones, nothing learned
  o.load = load_options(a.flags);
  o.progress = [](const std::string& line) { std::fprintf(stderr, "bench: %s\n", line.c_str()); };
  const fs::path out = a.out.empty() ? fs::path(utc_now("strata-bench-%Y%m%d-%H%M%S")) : fs::path(a.out);
  if (fs::exists(out) && !fs::is_directory(out)) throw Error("--out " + out.string() + ": not a folder");
  // Made before the runs, so that a folder that cannot be is said at once;
  // removed again if the runs fail and it was made here.
  std::error_code ec;
  const bool made = fs::create_directories(out, ec);
  if (ec) throw Error("--out " + out.string() + ": cannot create the folder: " + ec.message());
  BenchReport report;
  try {
    report = run_bench(o);
  } catch (...) {
    if (made) fs::remove(out, ec);
    throw;
  }
  write_file_atomically(out / "bench.json", bench_json(report).dump(2) + "\n");
  const std::string summary = bench_markdown(report);
  write_file_atomically(out / "summary.md", summary);
  write_file_atomically(out / "decode.svg", bench_svg(report, "decode"));
  write_file_atomically(out / "ttft.svg", bench_svg(report, "ttft"));
  std::printf("%s\nwritten to %s (bench.json, summary.md, decode.svg, ttft.svg)\n", summary.c_str(), out.c_str());
  return 0;
}

}  // namespace

void register_bench(CLI::App& app, Action& run) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Cold runs of a model under one or more RAM budgets: TTFT and decode, medians and ranges, in balanced "
               "order, drives probed around each run; JSON, Markdown and SVG");
  add_model_argument(cmd, a->model, kModelKinds);
  cmd->add_option("--ram", a->rams, "A RAM budget in GiB to run under (repeatable: one configuration each; default: "
                                    "generate's default budget)");
  cmd->add_option("--runs", a->runs, "Runs per configuration")->capture_default_str();
  cmd->add_option("--prompt", a->prompt, "Prompt tokens (ids 1000 + 37·i)")->capture_default_str();
  cmd->add_option("--tokens", a->tokens, "Tokens decoded after the first (greedy, end-of-sequence ignored)")
      ->capture_default_str();
  cmd->add_option("--out", a->out, "Folder for bench.json, summary.md, decode.svg, ttft.svg (default: "
                                   "./strata-bench-DATE)");
  cmd->add_option("--probe-seconds", a->probe_seconds, "Seconds of each drive probe around a run (0: none)")
      ->capture_default_str();
  cmd->add_flag("--no-drop-caches", a->no_drop, "Keep the page cache between runs (default: drop it where allowed)");
  add_threads_option(cmd, a->flags.threads);
  cmd->add_option("--device", a->flags.device, "Where to compute: cpu, vulkan, vulkan:N or auto")->capture_default_str();
  cmd->add_option("--ctx", a->flags.ctx, "Context the KV cache is budgeted for (default as generate)");
  cmd->add_option("--heat", a->flags.heat, "Expert heat file the runs start from (default: none, cold)");
  cmd->add_option("--profile", a->flags.profile, "The tuned profile (strata tune): a path or none (default: this "
                                                 "machine's, when there is one)");
  cmd->callback([&run, a] { run = [a] { return run_bench_command(*a); }; });
}

}  // namespace strata::cli
