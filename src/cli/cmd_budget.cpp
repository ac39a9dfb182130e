// strata budget: the Layer-Budget-Check (runtime/budget.h) for a model on
// this machine: the seeds' three steps, then strata's own prediction from
// the model's headers, the drives' measured ceilings and a short kernel run.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <set>

#include "cli/commands.h"
#include "model/expert_heat.h"
#include "remote/source.h"
#include "runtime/budget.h"
#include "runtime/budget_chart.h"
#include "runtime/budget_model.h"
#include "runtime/loader.h"
#include "cli/model_flags.h"
#include "storage/atomic_file.h"
#include "storage/drive_rates.h"
#include "storage/probe.h"
#include "storage/storage.h"
#include "util/error.h"
#include "util/process_memory.h"

namespace strata::cli {

namespace {

namespace fs = std::filesystem;

struct BudgetArgs {
  std::string model;
  std::optional<double> ram_gib;  // unset: what the loader would take of the memory available
  std::vector<std::string> drives;
  int64_t ctx = 0;
  bool allow_long_ctx = false;
  std::optional<int64_t> prompt;  // unset: 512, or what the context holds
  std::optional<int64_t> prefill_pass;  // unset: the budget's pass, as generate plans it
  int threads = 0;
  std::string heat;
  double probe_seconds = 2.0;
  std::string prefetch;  // "": the tuned profile's, else on
  float temperature = 0;
  std::string verify = "first";
  std::string profile;
  bool json = false;
  std::string svg;
  std::string drive_rate = "runs";
};

double gb(uint64_t b) { return static_cast<double>(b) / 1e9; }

// A saved probe's rate for reads of `block` bytes as strata issues them:
// the largest measured read size not above it and at least three quarters
// of it, at strata's depth (the deepest measured up to it: not the best of
// the depths, since a drive that reads faster at 4 in flight gives strata's
// 16 the rate at 16); 0 when it measured only larger reads, much smaller ones
// (which would understate the rate; another tool's probe of the drive, such
// as the demo's, may have) or deeper queues (which would overstate it): the
// drive is measured again.
double saved_rate(const ProbeDrive& d, uint64_t block, unsigned depth) {
  uint64_t pick = 0;
  for (const ProbeMeasurement& m : d.results)
    if (m.block <= block && 4 * m.block >= 3 * block) pick = std::max(pick, m.block);
  if (pick == 0) return 0;
  const ProbeMeasurement* at = nullptr;
  for (const ProbeMeasurement& m : d.results)
    if (m.block == pick && m.depth <= depth && (!at || m.depth > at->depth)) at = &m;
  return at ? at->gbps : 0;
}

struct Drive {
  fs::path target;   // a file the experts are in (read only), or a folder (--drive: a test file is written)
  double gbps = 0;   // the probe's ceiling
  std::string source;
  // The rates the prediction takes for a decode's reads and a prompt's, and
  // how many earlier runs each came from (0: the probe's ceiling).
  double decode_gbps = 0, prompt_gbps = 0;
  size_t decode_runs = 0, prompt_runs = 0;
};

// A drive's rates as earlier runs' reads found them (storage/drive_rates.h),
// each phase on its own, where any run of that phase is on record; else its
// probed ceiling.
void rate_by_runs(Drive& d, const std::optional<DriveRates>& rates) {
  d.decode_gbps = d.prompt_gbps = d.gbps;
  const DriveRateRecord* r = rates ? rates->drive_for(d.target) : nullptr;
  if (!r) return;
  if (const double g = r->gbps(ReadPhase::Decode); std::isfinite(g) && g > 0) {
    d.decode_gbps = g;
    d.decode_runs = r->decode.size();
  }
  if (const double g = r->gbps(ReadPhase::Prefill); std::isfinite(g) && g > 0) {
    d.prompt_gbps = g;
    d.prompt_runs = r->prefill.size();
  }
}

// "the last 3 runs' reads", or "its probe" for none.
std::string rate_source(size_t runs) {
  return runs == 0 ? "its probe" : runs == 1 ? "the last run's reads" : "the last " + std::to_string(runs) + " runs' reads";
}

// A drive's ceiling for the reads an expert is read in (`block` bytes each,
// its pieces) at `depth` in flight: from the saved probe when it measured
// that drive, else measured now (and said so on stderr).
void measure_drive(Drive& d, uint64_t block, unsigned depth, double seconds, const std::optional<ProbeResult>& saved) {
  const ProbeDrive* p = saved ? saved->drive_for(d.target) : nullptr;
  if (p)
    if (const double g = saved_rate(*p, block, depth); g > 0) {
      d.gbps = g;
      d.source = p->direct ? "saved probe" : "saved probe, not O_DIRECT: page-cache speed";
      return;
    }
  const std::string kib = std::to_string(block >> 10);
  std::fprintf(stderr, "budget: measuring %s (%s; `strata probe %s --block %.10g` saves one)\n", d.target.c_str(),
               p ? ("its saved probe has no rate for reads of the experts' pieces of " + kib + " KiB at depth " +
                    std::to_string(depth))
                       .c_str()
                 : "no saved probe of its drive",
               d.target.c_str(),
               static_cast<double>(block) / (1 << 20));
  ProbeOptions o;
  o.paths = {d.target.string()};
  o.file_bytes = 1ull << 30;  // a folder's test file
  o.blocks = {block};
  o.depths = {depth};
  o.seconds = seconds;  // split over the probe's three rounds: their median, not one sample's luck
  const ProbeResult r = run_probe(o);
  d.gbps = r.combined.best_gbps;
  d.source = r.combined.direct ? "measured now" : "measured now, not O_DIRECT: page-cache speed";
}

// One target per device: the experts' files (largest first) or the given
// folders; a second one on a device already listed is left out, saying so.
std::vector<Drive> drives_of(const BudgetModel& model, const std::vector<std::string>& folders) {
  std::vector<fs::path> targets;
  if (folders.empty())
    targets = model.expert_files;
  else
    for (const std::string& f : folders) {
      if (f.empty()) throw Error("--drive: give a folder on a drive");
      if (!fs::is_directory(f)) throw Error("--drive " + f + ": not a folder");
      targets.push_back(fs::absolute(f));
    }
  std::vector<Drive> out;
  std::set<std::string> seen;
  for (const fs::path& t : targets) {
    const std::string dev = device_of(t);
    if (dev.empty()) throw Error(t.string() + ": cannot be read");
    if (!seen.insert(dev).second) {
      std::fprintf(stderr, "budget: %s is on a drive already counted (device %s): counted once\n", t.c_str(),
                   dev.c_str());
      continue;
    }
    out.push_back({t, 0, ""});
  }
  return out;
}

double finite_positive(double v, const char* flag, double most) {
  if (!std::isfinite(v) || v <= 0 || v > most)
    throw Error(std::string(flag) + " must be a number above 0 and at most " + std::to_string(static_cast<long long>(most)));
  return v;
}

// The model's name for the chart: its file or folder name.
std::string model_name(const std::string& path) {
  fs::path p(path);
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

int run_budget(const BudgetArgs& a) {
  if (a.ram_gib) finite_positive(*a.ram_gib, "--ram", 1 << 20);  // GiB: a pebibyte at most
  if (a.prompt && *a.prompt < 1) throw Error("--prompt must be at least 1 token");
  if (a.prefill_pass && *a.prefill_pass < 1) throw Error("--prefill-pass must be at least 1");
  finite_positive(a.probe_seconds, "--probe-seconds", 600);
  if (a.ctx < 0) throw Error("--ctx must not be negative (0: the context generate would plan)");
  if (!a.svg.empty()) {  // said before anything is measured
    const fs::path folder = fs::path(a.svg).parent_path();
    if (fs::is_directory(a.svg) || (!folder.empty() && !fs::is_directory(folder)))
      throw Error("--svg " + a.svg + ": not a file in an existing folder");
  }
  LoadOptions lo;
  lo.context = a.ctx;
  lo.allow_long_context = a.allow_long_ctx;
  // (A remote model's experts are on no drive here: said before anything is fetched.)
  const bool remote = is_remote_source(a.model);
  if (remote && a.drives.empty())
    throw Error(a.model + ": a remote model's experts are on no drive here: give --drive with a folder on each "
                "drive its install would go on");
  const BudgetModel model = remote ? read_remote_budget_model(a.model, lo) : read_budget_model(a.model, lo);
  if (a.prompt && model.context > 0 && *a.prompt > model.context)
    throw Error("--prompt " + std::to_string(*a.prompt) + ": a prompt longer than the context of " +
                std::to_string(model.context) + " tokens (--ctx)");
  const int64_t prompt = a.prompt.value_or(model.context > 0 ? std::min<int64_t>(512, model.context) : 512);

  BudgetMachine m;
  const uint64_t process = process_resident_bytes();
  m.ram_bytes = budget_ram_bytes(
      a.ram_gib ? std::optional<uint64_t>(static_cast<uint64_t>(*a.ram_gib * (1ull << 30))) : std::nullopt);

  // (A remote model has no heat of its own here: only --heat gives one.)
  const fs::path heat_path = a.heat.empty() ? default_heat_path(model.identity) : fs::path(a.heat);
  bool heat_used = false;
  ExpertHeat::Guesses guesses;  // the heat's guesses on record
  if (a.heat == "none" || (a.heat.empty() && !model.remote.empty())) {
  } else if (fs::exists(heat_path)) {
    const ExpertHeat heat = ExpertHeat::load(heat_path, model.identity, model.config.num_layers,
                                             model.config.n_routed_experts, !a.heat.empty());
    guesses = heat.guesses();
    if (heat.total() > 0) {
      // The MoE layers' counts of `count(layer, expert)`, as budget takes them.
      const auto moe_layers = [&](auto count) {
        std::vector<std::vector<double>> layers;
        for (int64_t l = 0; l < model.config.num_layers; ++l)
          if (model.config.layer_is_moe(l)) {
            std::vector<double>& counts = layers.emplace_back(static_cast<size_t>(model.config.n_routed_experts));
            for (int64_t e = 0; e < model.config.n_routed_experts; ++e) counts[e] = count(l, e);
          }
        return layers;
      };
      m.heat = moe_layers([&](int64_t l, int64_t e) { return heat.count(l, e); });
      if (heat.wrong_total() > 0) m.wrong_guesses = moe_layers([&](int64_t l, int64_t e) { return heat.wrong(l, e); });
      heat_used = true;
    }
  } else if (!a.heat.empty())
    throw Error("--heat " + a.heat + ": no such file");

  // The runs' settings where the tuned profile gives them, as generate takes them.
  LoadOptions run;
  run.threads = a.threads;
  // (Given, on and auto are on; only none given takes the profile's.)
  run.prefetch = a.prefetch == "off"  ? LoadOptions::Prefetch::Off
                 : a.prefetch.empty() ? LoadOptions::Prefetch::Auto
                                      : LoadOptions::Prefetch::On;
  if (const std::optional<TunedProfile> t = tuned_profile(a.profile)) apply_profile(t->profile, t->path, run);
  const int threads = run.threads;
  const std::string& profile_used = run.profile;
  // The step as a run plans it at this budget and thread count.
  const PlannedStep planned = planned_step(model, m.ram_bytes, threads, run.max_batch_cap, a.prefill_pass.value_or(0));
  const uint64_t step = planned.bytes;
  m.other_resident = model.kv_bytes + step + process;
  m.step_rows = planned.rows;
  m.pass_rows = planned.pass;
  std::vector<Drive> drives = drives_of(model, a.drives);
  const std::optional<ProbeResult> saved = load_probe();
  // The depth the runs read at and the pieces an expert is read in (the
  // tuned profile's, else the storage's): a 2.1 MiB expert is two reads of
  // 1.05 MiB, which the drive may serve slower than one of 2.1 MiB.
  const unsigned depth = storage_options(run).queue_depth;
  const uint64_t piece = expert_read_bytes(model, run);
  std::optional<DriveRates> rates;
  if (a.drive_rate == "runs") try {
      rates = load_drive_rates(default_drive_rates_path());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "budget: %s: the drives are rated by their probe\n", e.what());
    }
  for (Drive& d : drives) {
    measure_drive(d, piece, depth, a.probe_seconds, saved);
    rate_by_runs(d, rates);
    m.drive_gbps.push_back(d.decode_gbps);
    m.prompt_drive_gbps.push_back(d.prompt_gbps);
  }

  const BudgetCompute compute = measure_compute(model, threads, prompt, planned.rows, a.temperature);
  m.decode_compute_s = compute.decode_s;
  m.prefill_compute_s = compute.prefill_s;
  m.guess_compute_s = compute.guess_s;
  // Only a pack's experts carry checksums.
  const bool hashed = model.kind == "pack" && a.verify != "off";
  m.hash_s_per_byte = hashed ? compute.hash_s_per_byte : 0.0;
  m.hash_hits = hashed && a.verify == "always";
  m.prefetch = run.prefetch != LoadOptions::Prefetch::Off;
  m.prefetch_read_factor = m.prefetch ? prefetch_read_factor(guesses.predicted, guesses.right) : 1.0;
  const bool factor_measured = m.prefetch && guesses_on_record(guesses.predicted);
  if (!factor_measured) m.wrong_guesses.clear();  // (too few to place)
  const char* factor_from = !m.prefetch              ? "no prefetch"
                            : !factor_measured       ? "default"
                            : m.wrong_guesses.empty() ? "heat"
                                                      : "heat, by expert";
  const BudgetPrediction p = predict_budget(model.shape, m, prompt);

  if (!a.svg.empty())
    write_file_atomically(a.svg, budget_chart_svg(model.shape, m, model_name(a.model) + ": predicted decode tok/s"));
  if (a.json) {
    nlohmann::json j = budget_json(p);
    j["model"] = {{"path", a.model},
                  {"kind", model.kind},
                  {"remote", model.remote.empty() ? nlohmann::json() : nlohmann::json(model.remote)},
                  {"remote_commit", model.remote_commit},
                  {"head_bytes", model.head_bytes},
                  {"headers_fetched_bytes", model.fetched_bytes},
                  {"total_bytes", model.shape.total_bytes},
                  {"trunk_bytes", model.shape.trunk_bytes},
                  {"expert_bytes", model.shape.expert_bytes},
                  {"moe_layers", model.shape.moe_layers},
                  {"experts", model.shape.experts},
                  {"experts_per_token", model.shape.experts_per_token},
                  {"trunk_matrices", model.trunk_matrices},
                  {"expert_matrices", model.expert_matrices},
                  {"context", model.context},
                  {"kv_bytes", model.kv_bytes}};
    nlohmann::json listed = nlohmann::json::array();
    for (const Drive& d : drives)
      listed.push_back({{"path", d.target.string()},
                        {"gbps", d.decode_gbps},
                        {"prompt_gbps", d.prompt_gbps},
                        {"decode_runs", d.decode_runs},
                        {"prompt_runs", d.prompt_runs},
                        {"probe_gbps", d.gbps},
                        {"depth", depth},
                        {"source", d.source}});
    j["machine"] = {{"ram_bytes", m.ram_bytes},
                    {"step_bytes", step},
                    {"step_rows", planned.rows},
                    {"pass_rows", planned.pass},
                    {"process_bytes", process},
                    {"drives", listed},
                    {"decode_compute_s", compute.decode_s},
                    {"product_overhead_s", compute.product_overhead_s},
                    {"guess_compute_s", compute.guess_s},
                    {"sample_s", compute.sample_s},
                    {"temperature", a.temperature},
                    {"hash_s_per_byte", m.hash_s_per_byte},
                    {"hash_hits", m.hash_hits},
                    {"attention_s", compute.attention_s},
                    {"prefill_attention_s_per_token", compute.prefill_attention_s},
                    {"decode_gbps", compute.decode_gbps},
                    {"prefill_compute_s_per_token", compute.prefill_s},
                    {"prefill_experts_busy", compute.prefill_experts_busy},
                    {"prefill_experts_s_per_token", compute.prefill_experts_s},
                    {"prefill_experts_timed_as", compute.prefill_experts_timed_as},
                    {"compute_timed_as", compute.timed_as},
                    {"trunk_timed_as", compute.trunk_timed_as},
                    {"trunk_decode_gbps", compute.trunk_decode_gbps},
                    {"prefetch", m.prefetch},
                    {"prefetch_read_factor", m.prefetch_read_factor},
                    {"prefetch_read_factor_from", factor_from},
                    {"guesses", {{"predicted", guesses.predicted}, {"right", guesses.right}}},
                    {"threads", threads},
                    {"profile", profile_used.empty() ? nlohmann::json() : nlohmann::json(profile_used)},
                    {"heat", heat_used ? heat_path.string() : ""}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }

  const std::string kind =
      model.remote.empty() ? model.kind : model.kind + ", remote: " + std::to_string(model.fetched_bytes) + " bytes of headers fetched";
  std::printf("%s (%s): %.1f GB of weights, trunk %.1f GB, %lld MoE layers of %lld experts of %.2f MB, top-%lld\n",
              a.model.c_str(), kind.c_str(), gb(model.shape.total_bytes), gb(model.shape.trunk_bytes),
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
  std::printf("  read per token       %.3f GB (the misses, x %.2f for the prefetch's wrong guesses: %s)\n",
              gb(p.read_per_token), p.read_factor,
              !m.prefetch                 ? "no prefetch"
              : !factor_measured          ? "assumed"
              : m.wrong_guesses.empty()   ? "from the guesses in the heat file"
                                          : "from the guesses in the heat file, by the experts they named");
  std::printf("  compute per token    %.1f ms decode, %.2f ms a prompt token (experts %s %.1f GB/s one row, trunk %s "
              "%.1f GB/s one row and %.1f at 64 rows, %.1f us a product beyond its bytes; attention %.2f and %.2f "
              "ms of them)\n",
              1e3 * compute.decode_s, 1e3 * compute.prefill_s, compute.timed_as.c_str(), compute.decode_gbps,
              compute.trunk_timed_as.c_str(), compute.trunk_decode_gbps, compute.prefill_gbps,
              1e6 * compute.product_overhead_s, 1e3 * compute.attention_s, 1e3 * compute.prefill_attention_s);
  for (size_t d = 0; d < drives.size(); ++d) {
    const Drive& x = drives[d];
    std::printf("  drive %zu              %.2f GB/s a decode (%s), %.2f a prompt (%s); probe %.2f at %u in flight (%s) "
                "%s\n",
                d + 1, x.decode_gbps, rate_source(x.decode_runs).c_str(), x.prompt_gbps,
                rate_source(x.prompt_runs).c_str(), x.gbps, depth, x.source.c_str(), x.target.c_str());
  }
  if (!p.too_small) {
    std::printf("\n  drives  GB/s    decode tok/s  TTFT (s, %lld tokens)  bound by\n", static_cast<long long>(prompt));
    for (const DrivePrediction& d : p.by_drives)
      std::printf("  %-6d  %-6.2f  %-12.2f  %-20.1f  %s\n", d.drives, d.gbps, d.decode_tok_s, d.ttft_s,
                  d.drive_bound ? "drives" : "compute");
  }
  if (p.ram_not_drive_bound > 0 && !p.fits)
    std::printf("\n  decode stops being drive-bound at %.1f GB of RAM (all drives)\n", gb(p.ram_not_drive_bound));
  std::printf("\n%s", p.verdict.c_str());
  if (p.too_small)  // in the unit --ram takes
    std::printf(" (--ram %.1f)", static_cast<double>(p.least_ram_bytes) / (1ull << 30));
  std::printf("\n");
  return 0;
}

}  // namespace

void register_budget(CLI::App& app, Action& run) {
  auto a = std::make_shared<BudgetArgs>();
  CLI::App* cmd = app.add_subcommand(
      "budget", "Predict decode tok/s and time to first token of a model on this machine (the Layer-Budget-Check)");
  cmd->add_option("MODEL,--model", a->model,
                  "A checkpoint, GGUF file or pack, or a remote model (hf://ORG/REPO, http(s)://..., s3://...: only "
                  "its headers are fetched)")
      ->required();
  cmd->add_option("--ram", a->ram_gib,
                  "RAM budget in GiB for the whole process (default: what generate would take of the memory "
                  "available)");
  cmd->add_option("--drive", a->drives,
                  "A folder on each drive the experts would be read from, where a test file is written if its "
                  "drive has no saved probe (repeatable; default: the model's own expert files, read only; a "
                  "remote model needs it)");
  cmd->add_option("--ctx", a->ctx, "Context the KV cache is budgeted for (default as generate)");
  cmd->add_flag("--allow-long-ctx", a->allow_long_ctx, "Allow --ctx beyond the model's max_position_embeddings");
  cmd->add_option("--prompt", a->prompt, "Prompt length for the time to first token (default: 512, or what the context holds)");
  cmd->add_option("--prefill-pass", a->prefill_pass,
                  "Rows of one prompt pass, as generate's --prefill-pass (default: what the budget allows, up to "
                  "--ctx; 1: one step at a time)");
  add_threads_option(cmd, a->threads, "Threads of the compute measurement (default: all cores)");
  cmd->add_option("--heat", a->heat,
                  "Expert heat file for the hit rate, from earlier runs like the one predicted (routing after long prompts differs "
                  "from routing after short ones) (default: the model's own, if any; none: uniform routing)");
  cmd->add_option("--drive-rate", a->drive_rate,
                  "How a drive is rated: runs takes what earlier runs' reads got from it, a decode's and a prompt's "
                  "apart, where any are on record (they keep fewer reads in flight than a probe), else its probe; "
                  "probe takes the probe only")
      ->check(CLI::IsMember({"runs", "probe"}))
      ->capture_default_str();
  cmd->add_option("--probe-seconds", a->probe_seconds, "Seconds a drive without a saved probe is measured")
      ->capture_default_str();
  cmd->add_option("--prefetch", a->prefetch,
                  "The runs' next-layer prefetch (generate's --prefetch; auto is on; default: the tuned profile's, "
                  "else on): on counts its wrong guesses among the reads")
      ->check(CLI::IsMember({"on", "off", "auto"}));
  cmd->add_option("--temperature", a->temperature,
                  "The runs' sampling temperature (generate's; 0 picks the largest logit): what picking a token "
                  "costs")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--verify", a->verify,
                  "The runs' expert checksums (generate's --verify; a pack's): what hashing the reads costs "
                  "(always: the cache hits too)")
      ->check(CLI::IsMember({"first", "always", "off"}))
      ->capture_default_str();
  cmd->add_option("--profile", a->profile,
                  "The tuned profile whose threads and prefetch the runs would use: a path or none (default: this "
                  "machine's, when there is one)");
  cmd->add_flag("--json", a->json, "Print the figures as JSON");
  cmd->add_option("--svg", a->svg, "Write a chart: predicted tok/s against RAM, one curve per drive count");
  cmd->callback([&run, a] { run = [a] { return run_budget(*a); }; });
}

}  // namespace strata::cli
