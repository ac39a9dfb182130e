#include "runtime/tune.h"

#include <algorithm>
#include <map>
#include <random>
#include <thread>

#include "runtime/budget_model.h"
#include "runtime/generator.h"
#include "runtime/loader.h"
#include "runtime/product_timer.h"
#include "storage/probe.h"
#include "util/error.h"
#include "util/median.h"
#include "util/process_memory.h"
#include "util/thread_pool.h"

namespace strata {

namespace {

namespace fs = std::filesystem;

void say(const TuneOptions& o, const std::string& line) {
  if (o.progress) o.progress(line);
}

// 1, 2, 4, ... below the cores, and all of them.
std::vector<int> thread_counts() {
  const int all = std::max(1, default_thread_count());
  std::vector<int> out;
  for (int t = 1; t < all; t *= 2) out.push_back(t);
  out.push_back(all);
  return out;
}

void tune_threads(const TuneOptions& o, bool mxfp4, TuneProfile& p) {
  // Decode's products are many small ones (1 MiB here), a prompt's few large ones.
  const ProductTimer small(mxfp4, 1ull << 20), large(mxfp4);
  std::map<int, std::pair<double, double>> took;  // threads -> (one row, 64 rows) seconds
  for (int t : thread_counts()) {
    ThreadPool pool(t);
    took[t] = {small.seconds(1, pool, o.seconds / 2), large.seconds(64, pool, o.seconds / 2)};
    say(o, "threads " + std::to_string(t) + ": " + std::to_string(small.matrix_bytes() / took[t].first / 1e9) +
               " GB/s one row of 1 MiB matrices, " +
               std::to_string(64 * large.matrix_bytes() / took[t].second / 1e9) + " GB/s 64 rows");
  }
  double best_one = 1e30, best_many = 1e30;
  for (const auto& [t, s] : took) best_one = std::min(best_one, s.first), best_many = std::min(best_many, s.second);
  double best_score = 1e30;
  nlohmann::json record = nlohmann::json::array();
  for (const auto& [t, s] : took) {
    const double score = s.first / best_one + s.second / best_many;
    record.push_back({{"threads", t}, {"one_row_s", s.first}, {"rows_64_s", s.second}});
    if (score < best_score) best_score = score, p.threads = t;
  }
  p.measured["threads"] = record;
}

// Piece sizes up to an expert's bytes (all of them without a model).
void tune_drives(const TuneOptions& o, uint64_t expert_bytes, TuneProfile& p) {
  ProbeOptions po;
  for (const fs::path& d : o.drives) po.paths.push_back(d.string());
  po.file_bytes = o.test_file_bytes;
  po.blocks.clear();
  for (uint64_t b = 256ull << 10; b <= (4ull << 20); b *= 2)
    if (expert_bytes == 0 || b <= std::max<uint64_t>(expert_bytes, 256ull << 10)) po.blocks.push_back(b);
  po.depths = {4, 8, 16, 32};
  po.seconds = o.seconds;
  po.rounds = 1;
  po.progress = o.progress;
  const ProbeResult r = run_probe(po);
  const ProbeDrive& all = r.combined;
  double best = 0;
  for (const ProbeMeasurement& m : all.results)
    if (m.gbps > best) best = m.gbps, p.piece_bytes = m.block;
  // The fewest reads in flight that keep the drives within 5% of that.
  double at_piece = 0;
  for (const ProbeMeasurement& m : all.results)
    if (m.block == p.piece_bytes) at_piece = std::max(at_piece, m.gbps);
  p.io_depth = 0;
  for (const ProbeMeasurement& m : all.results)
    if (m.block == p.piece_bytes && m.gbps >= 0.95 * at_piece && (p.io_depth == 0 || m.depth < p.io_depth))
      p.io_depth = m.depth;
  p.measured["drives"] = nlohmann::json::parse(probe_to_json(r))["combined"];
}

std::vector<int32_t> fixed_prompt(int64_t vocab, size_t n) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> pick(0, std::max<int64_t>(vocab - 1, 0));
  std::vector<int32_t> ids(n);
  for (int32_t& t : ids) t = static_cast<int32_t>(pick(rng));
  return ids;
}

// One cold streamed run: seconds of the prompt's prefill and per decoded
// token. nullopt when the model cannot run so (a step too wide for the budget).
std::optional<std::pair<double, double>> timed_run(const TuneOptions& o, LoadOptions lo, size_t prompt, int tokens) {
  // A setting the model cannot run with (a step too wide for the budget) is
  // skipped, saying why; the measurements made so far are kept.
  try {
    const std::unique_ptr<Model> model = load_model(o.model, lo);
    GenerateOptions g;
    g.max_new_tokens = tokens;
    // A model of a short context takes what fits of the prompt.
    prompt = static_cast<size_t>(std::clamp<int64_t>(model->context() - tokens - 1, 1, static_cast<int64_t>(prompt)));
    const GenerateResult r = generate(*model, fixed_prompt(model->config().vocab_size, prompt), g);
    const double per_token = r.tokens.size() > 1 ? r.decode_s / static_cast<double>(r.tokens.size() - 1) : 0;
    return std::make_pair(r.prefill_s, per_token);
  } catch (const std::exception& e) {
    say(o, std::string("  skipped: ") + e.what());
    return std::nullopt;
  }
}

// The model's runs: streamed, cold each run, nothing learned between them.
LoadOptions streamed_cold(const TuneOptions& o) {
  LoadOptions lo = o.load;
  lo.stream = true;
  lo.heat = "none";
  lo.notice = nullptr;
  lo.show_progress = false;
  return lo;
}

void tune_with_model(const TuneOptions& o, TuneProfile& p) {
  LoadOptions lo = streamed_cold(o);
  if (p.threads > 0) lo.threads = p.threads;
  if (p.io_depth > 0) lo.io_depth = p.io_depth;
  if (p.piece_bytes > 0) lo.piece_bytes = p.piece_bytes;
  if (lo.ram_bytes == 0 && lo.cache_slots == 0) {
    // A quarter of the experts cached, so that reads happen; within what
    // the machine has (the loader's budget from the memory available).
    const BudgetModel m = read_budget_model(o.model, lo);
    lo.ram_bytes = budget_ram_bytes(std::nullopt);
    const uint64_t room = expert_cache_bytes(m, lo.ram_bytes, process_resident_bytes(), lo.threads) /
                          std::max<uint64_t>(1, m.shape.expert_bytes);
    const uint64_t quarter = static_cast<uint64_t>(std::max<int64_t>(1, m.shape.moe_layers * m.shape.experts / 4));
    lo.cache_slots = static_cast<size_t>(std::max<uint64_t>(1, std::min(quarter, room)));
  }
  // Prefetch, alternated on/off/off/on so that a drift favours neither. It
  // reads ahead for decode tokens and for prompts alike, so both are timed:
  // off only where it decodes faster without making a prompt slower.
  std::map<std::string, std::vector<double>> decode, prefill;
  for (const char* choice : {"on", "off", "off", "on"}) {
    LoadOptions run = lo;
    run.prefetch = std::string(choice) == "on" ? LoadOptions::Prefetch::On : LoadOptions::Prefetch::Off;
    if (const auto t = timed_run(o, run, 512, 24)) {
      prefill[choice].push_back(t->first);
      decode[choice].push_back(t->second);
      say(o, std::string("prefetch ") + choice + ": " + std::to_string(t->second * 1e3) + " ms a token, a 512-token prompt in " +
                 std::to_string(t->first) + " s");
    }
  }
  if (decode["on"].size() == 2 && decode["off"].size() == 2) {
    const double on = median(decode["on"]), off = median(decode["off"]);
    const double on_prompt = median(prefill["on"]), off_prompt = median(prefill["off"]);
    if (on < 0.97 * off || on_prompt < 0.97 * off_prompt) p.prefetch = "on";
    else if (off < 0.97 * on && off_prompt <= 1.03 * on_prompt) p.prefetch = "off";
    p.measured["prefetch"] = {{"on_s_per_token", on},
                              {"off_s_per_token", off},
                              {"on_prompt_s", on_prompt},
                              {"off_prompt_s", off_prompt}};
  }
  if (!p.prefetch.empty())
    lo.prefetch = p.prefetch == "on" ? LoadOptions::Prefetch::On : LoadOptions::Prefetch::Off;
  // The widest prefill step: a 512-token prompt at 32..512 rows a step.
  nlohmann::json rows = nlohmann::json::array();
  double best = 1e30;
  for (int64_t r : {32, 64, 128, 256, 512}) {
    LoadOptions run = lo;
    run.max_batch = r;
    if (const auto t = timed_run(o, run, 512, 1)) {
      rows.push_back({{"rows", r}, {"prefill_s", t->first}});
      say(o, "prefill at " + std::to_string(r) + " rows a step: " + std::to_string(t->first) + " s");
      if (t->first < 0.97 * best || (t->first < best && p.max_batch == 0)) best = t->first, p.max_batch = r;
    }
  }
  p.measured["prefill_rows"] = rows;
  if (decode["on"].size() + decode["off"].size() < 4 || rows.empty())
    say(o, "some of the model's runs were skipped (above): what they decide is left to the defaults");
}

}  // namespace

TuneProfile run_tune(const TuneOptions& o) {
  TuneProfile p;
  p.machine = machine_key();
  uint64_t expert_bytes = 0;
  bool mxfp4 = false;
  if (!o.model.empty()) {
    const BudgetModel m = read_budget_model(o.model, o.load);
    expert_bytes = m.shape.expert_bytes;
    mxfp4 = std::string(timed_format(m.expert_dtype)) == "MXFP4";
    // A model that cannot run within the budget is the loader's one error
    // now, not a skipped run after minutes of measuring (open_model: every
    // check of loading, without reading the trunk in).
    (void)open_model(o.model, streamed_cold(o));
  }
  say(o, "threads: products over a matrix larger than the caches");
  tune_threads(o, mxfp4, p);
  if (!o.drives.empty()) {
    say(o, "drives: O_DIRECT reads by piece size and depth");
    tune_drives(o, expert_bytes, p);
  }
  if (!o.model.empty()) {
    say(o, "model: prefetch and prefill rows, streamed");
    tune_with_model(o, p);
  }
  return p;
}

}  // namespace strata
