// strata budget: the Layer-Budget-Check (runtime/budget.h) for a model on
// this machine: the seeds' three steps, then strata's own prediction from
// the model's headers, the drives' measured ceilings and a short kernel run.
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "model/expert_heat.h"
#include "runtime/budget.h"
#include "runtime/budget_chart.h"
#include "runtime/budget_model.h"
#include "storage/atomic_file.h"
#include "storage/probe.h"
#include "util/error.h"
#include "util/process_memory.h"

namespace strata::cli {

namespace {

namespace fs = std::filesystem;

struct BudgetArgs {
  std::string model;
  double ram_gib = 0;  // 0: the memory available
  std::vector<std::string> drives;
  int64_t ctx = 0;
  int64_t prompt = 512;
  int threads = 0;
  std::string heat;
  double probe_seconds = 2.0;
  bool json = false;
  std::string svg;
};

double gb(uint64_t b) { return static_cast<double>(b) / 1e9; }

// A drive's ceiling for expert-sized reads: from the saved probe when it
// measured that drive, else measured now (and said so on stderr).
double drive_ceiling(const fs::path& dir, uint64_t expert_bytes, double seconds, const std::optional<ProbeResult>& saved,
                     std::string& source) {
  const uint64_t block = (expert_bytes + 4095) / 4096 * 4096;
  if (saved)
    if (const ProbeDrive* d = saved->drive_for(dir)) {
      const double at_block = d->best_gbps_for(block);
      source = at_block > 0 ? "saved probe" : "saved probe (another read size)";
      return at_block > 0 ? at_block : d->best_gbps;
    }
  std::fprintf(stderr, "budget: measuring %s (no saved probe of it; `strata probe` saves one)\n", dir.c_str());
  ProbeOptions o;
  o.paths = {dir.string()};
  o.file_bytes = 1ull << 30;
  o.blocks = {block};
  o.depths = {4, 16};
  o.seconds = seconds;
  o.rounds = 1;
  source = "measured now";
  return run_probe(o).combined.best_gbps;
}

int run_budget(const BudgetArgs& a) {
  if (a.ram_gib < 0) throw Error("--ram must not be negative");
  if (a.prompt < 1) throw Error("--prompt must be at least 1 token");
  if (!(a.probe_seconds > 0)) throw Error("--probe-seconds must be positive");
  LoadOptions lo;
  lo.context = a.ctx;
  if (a.ctx < 0) throw Error("--ctx must be at least 1");
  const BudgetModel model = read_budget_model(a.model, lo);

  BudgetMachine m;
  m.ram_bytes = a.ram_gib > 0 ? static_cast<uint64_t>(a.ram_gib * (1ull << 30)) : available_memory_bytes();
  if (m.ram_bytes == UINT64_MAX) throw Error("the memory available cannot be read on this machine: give --ram");
  // The step's buffers the loader gives a budget (a sixteenth, 128 MiB at
  // least) and the process itself.
  const uint64_t step = std::max<uint64_t>(128ull << 20, m.ram_bytes / 16);
  const uint64_t process = resident_anonymous_bytes();
  m.other_resident = model.kv_bytes + step + process;

  const fs::path heat_path = a.heat.empty() ? default_heat_path(model.identity) : fs::path(a.heat);
  bool heat_used = false;
  if (fs::exists(heat_path)) {
    const ExpertHeat heat = ExpertHeat::load(heat_path, model.identity, model.config.num_layers,
                                             model.config.n_routed_experts, !a.heat.empty());
    if (heat.total() > 0) {
      for (int64_t l = 0; l < model.config.num_layers; ++l)
        if (model.config.layer_is_moe(l)) {
          std::vector<double> counts(static_cast<size_t>(model.config.n_routed_experts));
          for (int64_t e = 0; e < model.config.n_routed_experts; ++e) counts[e] = heat.count(l, e);
          m.heat.push_back(std::move(counts));
        }
      heat_used = true;
    }
  } else if (!a.heat.empty())
    throw Error("--heat " + a.heat + ": no such file");

  const std::vector<fs::path> dirs = a.drives.empty() ? model.drive_dirs : std::vector<fs::path>(a.drives.begin(), a.drives.end());
  const std::optional<ProbeResult> saved = load_probe();
  std::vector<std::string> sources;
  for (const fs::path& d : dirs) {
    std::string source;
    m.drive_gbps.push_back(drive_ceiling(d, model.shape.expert_bytes, a.probe_seconds, saved, source));
    sources.push_back(source);
  }

  const BudgetCompute compute = measure_compute(model, a.threads);
  m.decode_compute_s = compute.decode_s;
  m.prefill_compute_s = compute.prefill_s;
  const BudgetPrediction p = predict_budget(model.shape, m, a.prompt);

  if (!a.svg.empty())
    write_file_atomically(a.svg, budget_chart_svg(model.shape, m, fs::path(a.model).filename().string() +
                                                                      ": predicted decode tok/s"));
  if (a.json) {
    nlohmann::json j = budget_json(p);
    j["model"] = {{"path", a.model},
                  {"kind", model.kind},
                  {"total_bytes", model.shape.total_bytes},
                  {"trunk_bytes", model.shape.trunk_bytes},
                  {"expert_bytes", model.shape.expert_bytes},
                  {"moe_layers", model.shape.moe_layers},
                  {"experts", model.shape.experts},
                  {"experts_per_token", model.shape.experts_per_token},
                  {"context", model.context},
                  {"kv_bytes", model.kv_bytes}};
    nlohmann::json drives = nlohmann::json::array();
    for (size_t d = 0; d < dirs.size(); ++d)
      drives.push_back({{"path", dirs[d].string()}, {"gbps", m.drive_gbps[d]}, {"source", sources[d]}});
    j["machine"] = {{"ram_bytes", m.ram_bytes},
                    {"step_bytes", step},
                    {"process_bytes", process},
                    {"drives", drives},
                    {"decode_compute_s", compute.decode_s},
                    {"prefill_compute_s_per_token", compute.prefill_s},
                    {"compute_timed_as", compute.timed_as},
                    {"heat", heat_used ? heat_path.string() : ""}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }

  std::printf("%s (%s): %.1f GB of weights, trunk %.1f GB, %lld MoE layers of %lld experts of %.2f MB, top-%lld\n",
              a.model.c_str(), model.kind.c_str(), gb(model.shape.total_bytes), gb(model.shape.trunk_bytes),
              static_cast<long long>(model.shape.moe_layers), static_cast<long long>(model.shape.experts),
              static_cast<double>(model.shape.expert_bytes) / 1e6, static_cast<long long>(model.shape.experts_per_token));
  std::printf("\nThe seeds' Layer-Budget-Check:\n");
  std::printf("  1. total weights      %.1f GB\n", gb(p.seed.total_bytes));
  std::printf("  2. hot share          %.1f GB RAM / %.1f GB = %.1f%%\n", gb(p.seed.ram_bytes), gb(p.seed.total_bytes),
              100.0 * p.seed.hot_share);
  std::printf("  3. drives             1: 52%%, 2: 73%%, 3: 90%%, 4: 100%% of a four-drive rate\n");
  std::printf("\nstrata's prediction for this machine:\n");
  std::printf("  resident             %.2f GB (trunk %.2f, KV for %lld positions %.2f, step buffers %.2f, process %.2f)\n",
              gb(p.resident_bytes), gb(model.shape.trunk_bytes), static_cast<long long>(model.context),
              gb(model.kv_bytes), gb(step), gb(process));
  std::printf("  expert cache         %llu experts (%.2f GB); hit rate %.1f%% (%s)\n",
              static_cast<unsigned long long>(p.cache_slots),
              gb(p.cache_slots * model.shape.expert_bytes), 100.0 * p.hit_rate,
              p.fits ? "every expert fits" : heat_used ? "from the heat file" : "uniform routing: a floor");
  std::printf("  read per token       %.3f GB\n", gb(p.read_per_token));
  std::printf("  compute per token    %.1f ms decode, %.2f ms a prompt token (%s products, %.1f and %.1f GB/s)\n",
              1e3 * compute.decode_s, 1e3 * compute.prefill_s, compute.timed_as.c_str(), compute.decode_gbps,
              compute.prefill_gbps);
  for (size_t d = 0; d < dirs.size(); ++d)
    std::printf("  drive %zu              %.2f GB/s (%s) %s\n", d + 1, m.drive_gbps[d], sources[d].c_str(),
                dirs[d].c_str());
  std::printf("\n  drives  GB/s    decode tok/s  TTFT %lld tokens  bound by\n", static_cast<long long>(a.prompt));
  for (const DrivePrediction& d : p.by_drives)
    std::printf("  %-6d  %-6.2f  %-12.2f  %-15.1f  %s\n", d.drives, d.gbps, d.decode_tok_s, d.ttft_s,
                d.drive_bound ? "drives" : "compute");
  if (p.ram_not_drive_bound > 0 && !p.fits)
    std::printf("\n  decode stops being drive-bound at %.1f GB of RAM (all drives)\n", gb(p.ram_not_drive_bound));
  std::printf("\n%s\n", p.verdict.c_str());
  return 0;
}

}  // namespace

void register_budget(CLI::App& app, Action& run) {
  auto a = std::make_shared<BudgetArgs>();
  CLI::App* cmd = app.add_subcommand(
      "budget", "Predict decode tok/s and time to first token of a model on this machine (the Layer-Budget-Check)");
  cmd->add_option("MODEL,--model", a->model, "A checkpoint, GGUF file or pack")->required();
  cmd->add_option("--ram", a->ram_gib, "RAM budget in GiB for the whole process (default: the memory available)");
  cmd->add_option("--drive", a->drives,
                  "A folder on each drive the experts are read from (repeatable; default: where the model's "
                  "experts are)");
  cmd->add_option("--ctx", a->ctx, "Context the KV cache is budgeted for (default as generate)");
  cmd->add_option("--prompt", a->prompt, "Prompt length for the time to first token")->capture_default_str();
  cmd->add_option("--threads", a->threads, "Threads of the compute measurement (default: all cores)");
  cmd->add_option("--heat", a->heat, "Expert heat file for the hit rate (default: the model's own, if any)");
  cmd->add_option("--probe-seconds", a->probe_seconds, "Seconds a drive without a saved probe is measured")
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "Print the figures as JSON");
  cmd->add_option("--svg", a->svg, "Write a chart: predicted tok/s against RAM, one curve per drive count");
  cmd->callback([&run, a] { run = [a] { return run_budget(*a); }; });
}

}  // namespace strata::cli
