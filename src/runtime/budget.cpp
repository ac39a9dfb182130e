#include "runtime/budget.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>

#include "util/error.h"

namespace strata {

namespace {

double gb(uint64_t bytes) { return static_cast<double>(bytes) / 1e9; }

std::string gb_text(uint64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f GB", gb(bytes));
  return s;
}

uint64_t all_experts(const BudgetShape& s) {
  return static_cast<uint64_t>(s.moe_layers) * static_cast<uint64_t>(s.experts);
}

using Heat = std::vector<std::vector<double>>;

void check_heat(const BudgetShape& s, const Heat& heat, const char* what = "the heat") {
  if (heat.empty()) return;
  if (static_cast<int64_t>(heat.size()) != s.moe_layers)
    throw Error(std::string("budget: ") + what + " has " + std::to_string(heat.size()) + " layers, the model " +
                std::to_string(s.moe_layers) + " MoE layers");
  for (const std::vector<double>& layer : heat)
    if (static_cast<int64_t>(layer.size()) != s.experts)
      throw Error(std::string("budget: ") + what + " has a layer of " + std::to_string(layer.size()) +
                  " experts, the model " + std::to_string(s.experts));
}

// A layer's counts as use shares shrunk towards uniform by their sampling
// noise (budget.h): 1/E + λ (c/N − 1/E), λ = the share of the counts'
// spread that uniform routing's noise does not explain.
std::vector<double> shrunk_shares(const std::vector<double>& counts, int64_t k) {
  const double e = static_cast<double>(counts.size());
  const double n = std::accumulate(counts.begin(), counts.end(), 0.0), mean = n / e;
  double spread = 0;
  for (double c : counts) spread += (c - mean) * (c - mean);
  spread /= e;
  const double pick = std::min(1.0, static_cast<double>(k) / e);
  const double noise = mean * (1.0 - pick);
  const double lambda = spread > noise ? (spread - noise) / spread : 0.0;
  std::vector<double> p(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) p[i] = 1.0 / e + lambda * (counts[i] / n - 1.0 / e);
  return p;
}

int64_t picks_a_layer(const BudgetShape& s) { return std::clamp<int64_t>(s.experts_per_token, 1, s.experts); }

// The heat as the cache layout needs it, worked out once (the bisection
// below and the chart ask for many cache sizes): each layer's shrunk shares
// most used first (uniform for a layer never seen), its wrong guesses in the
// same order, and every expert a layer's kept slots could hold, hottest
// first over all layers (the cache is one: least frequently used goes first,
// whatever its layer).
struct RankedHeat {
  Heat shares;  // empty: no heat
  std::vector<bool> seen;  // a layer's: any count on record
  Heat wrong;   // empty: none on record
  std::vector<std::pair<double, size_t>> kept_order;  // (share, layer)
};

RankedHeat ranked_heat(const BudgetShape& s, const Heat& heat, const Heat& wrong) {
  RankedHeat r;
  const bool with_wrong = !wrong.empty() && wrong.size() == heat.size();
  const size_t keepable = static_cast<size_t>(s.experts - picks_a_layer(s));
  for (size_t l = 0; l < heat.size(); ++l) {
    const std::vector<double>& uses = heat[l];
    std::vector<size_t> order(uses.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return uses[a] > uses[b]; });
    const bool seen = std::accumulate(uses.begin(), uses.end(), 0.0) > 0;
    r.seen.push_back(seen);
    const std::vector<double> shares = seen ? shrunk_shares(uses, s.experts_per_token)
                                            : std::vector<double>(uses.size(), 1.0 / static_cast<double>(uses.size()));
    std::vector<double>& sorted = r.shares.emplace_back();
    for (size_t i : order) sorted.push_back(shares[i]);
    for (size_t i = 0; i < std::min(keepable, sorted.size()); ++i) r.kept_order.emplace_back(sorted[i], l);
    if (!with_wrong) continue;
    std::vector<double>& w = r.wrong.emplace_back();
    for (size_t i : order) w.push_back(wrong[l][i]);
  }
  std::stable_sort(r.kept_order.begin(), r.kept_order.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  return r;
}

// How a layer's part of the cache is laid out: k slots a layer turn over
// with each token's misses and hold any of the rest; the others keep the
// most used experts, wherever they are hottest (a token picks k in every
// layer alike, but one layer's routing may be far more concentrated than
// another's). With fewer than k slots a layer, all turn over.
struct LayerCache {
  double slots = 0;  // a layer's
  double kept = 0;   // of them, those that keep its most used experts
};

// A cache of `slots` experts, laid out by layer once for the hit rate and
// the reads it leads to.
struct CacheAt {
  uint64_t slots = 0;
  std::vector<LayerCache> layers;
};

CacheAt cache_at(const BudgetShape& s, uint64_t slots, const RankedHeat& heat) {
  const double layers = static_cast<double>(s.moe_layers), k = static_cast<double>(picks_a_layer(s));
  const double total = static_cast<double>(slots);
  CacheAt at{slots, std::vector<LayerCache>(static_cast<size_t>(s.moe_layers))};
  std::vector<LayerCache>& c = at.layers;
  if (heat.shares.empty() || total <= layers * k) {
    // Without heat every expert is alike, and with k slots a layer or
    // fewer none is kept: the slots split evenly.
    for (LayerCache& l : c) l = {total / layers, std::max(0.0, total / layers - k)};
    return at;
  }
  // Hottest first; experts of equal share (a layer's uniform ones, layers
  // alike) share what is left evenly, as no order among them is better.
  double keep = total - layers * k;
  for (size_t i = 0; i < heat.kept_order.size() && keep > 0;) {
    size_t end = i + 1;
    while (end < heat.kept_order.size() && heat.kept_order[end].first == heat.kept_order[i].first) ++end;
    const double group = static_cast<double>(end - i), each = std::min(1.0, keep / group);
    for (; i < end; ++i) c[heat.kept_order[i].second].kept += each;
    keep -= each * group;
  }
  for (LayerCache& l : c) l.slots = l.kept + k;
  return at;
}

// The part of `shares` (a layer's, in the order of its most used experts,
// summing to 1) that its cache holds: the kept whole slots, then the next
// one's fraction, and the turning-over slots' share of the rest.
double held_share(const std::vector<double>& shares, const LayerCache& c) {
  const size_t whole = std::min(shares.size(), static_cast<size_t>(c.kept));
  double held = std::accumulate(shares.begin(), shares.begin() + static_cast<std::ptrdiff_t>(whole), 0.0);
  if (whole < shares.size()) held += shares[whole] * (c.kept - static_cast<double>(whole));
  const double e = static_cast<double>(shares.size());
  return c.kept >= e ? 1.0 : held + (1.0 - held) * std::min(1.0, (c.slots - c.kept) / (e - c.kept));
}

// expected_hit_rate() over ranked heat.
double hit_rate_ranked(const BudgetShape& s, const CacheAt& cache, const RankedHeat& heat) {
  if (s.moe_layers <= 0 || s.experts <= 0) return 0;
  if (cache.slots >= all_experts(s)) return 1.0;
  const std::vector<LayerCache>& c = cache.layers;
  const double e = static_cast<double>(s.experts);
  if (heat.shares.empty()) return c[0].slots / e;
  double hit = 0;
  for (size_t l = 0; l < heat.shares.size(); ++l) hit += held_share(heat.shares[l], c[l]);
  return hit / static_cast<double>(heat.shares.size());
}

// Bytes read for each byte a token misses at `slots` (whose hit rate is
// `hit`): `factor` is one plus
// the wrong guesses a pick (the machine's); with the wrong guesses' experts
// on record, their part grows by how much more often the cache lacks a
// wrong guess's expert than a pick's (colder experts are guessed wrongly
// more often than picked: held by the kept slots less often).
double read_factor(const BudgetShape& s, const CacheAt& cache, double hit, const RankedHeat& heat, double factor) {
  if (factor <= 1 || heat.wrong.empty() || cache.slots >= all_experts(s)) return factor;
  const double missed = 1.0 - hit;
  const std::vector<LayerCache>& c = cache.layers;
  double wrong = 0, wrong_missed = 0;
  for (size_t l = 0; l < heat.wrong.size(); ++l) {
    const double n = std::accumulate(heat.wrong[l].begin(), heat.wrong[l].end(), 0.0);
    if (n <= 0) continue;
    double held = c[l].slots / static_cast<double>(s.experts);  // a layer never seen: any expert alike
    if (heat.seen[l]) {
      std::vector<double> shares = heat.wrong[l];
      for (double& w : shares) w /= n;
      held = held_share(shares, c[l]);
    }
    wrong += n;
    wrong_missed += n * (1.0 - held);
  }
  if (!(wrong > 0) || !(missed > 0)) return factor;
  const double f = 1.0 + (factor - 1.0) * (wrong_missed / wrong) / missed;
  return std::isfinite(f) ? f : factor;  // (counts too large to add up)
}

// A decode token's seconds with `cache` (hit rate `hit`) over `gbps` of
// drives.
double read_seconds(const BudgetShape& s, const CacheAt& cache, double hit, const RankedHeat& heat, double gbps,
                    double factor) {
  const double bytes = static_cast<double>(s.experts_per_token * s.moe_layers) * static_cast<double>(s.expert_bytes) *
                       (1.0 - hit) * read_factor(s, cache, hit, heat, factor);
  return bytes / (gbps * 1e9);
}

// The rows of a prompt's (first) pass.
int64_t pass_tokens(const BudgetMachine& m, int64_t prompt) {
  const int64_t pass = m.pass_rows > 0 ? std::max(m.pass_rows, m.step_rows) : m.step_rows;
  return pass > 0 ? std::min(prompt, pass) : prompt;
}

// Experts (per layer) of `tokens` rows in runs of `run` rows, each run's read again.
double reads_in_runs(const BudgetShape& s, int64_t tokens, int64_t run) {
  if (run <= 0 || run >= tokens) return distinct_experts(s.experts, s.experts_per_token, tokens);
  return static_cast<double>(tokens / run) * distinct_experts(s.experts, s.experts_per_token, run) +
         distinct_experts(s.experts, s.experts_per_token, tokens % run);
}

// A cold prompt's reads, per MoE layer, in experts: its distinct ones when
// the cache holds all of them; else each pass's, where the cache holds a
// layer's experts of a pass, else each step's.
double prompt_reads(const BudgetShape& s, const BudgetMachine& m, int64_t prompt, uint64_t slots) {
  const double whole = distinct_experts(s.experts, s.experts_per_token, prompt);
  if (static_cast<double>(slots) >= whole * static_cast<double>(s.moe_layers)) return whole;
  const int64_t pass = pass_tokens(m, prompt);
  auto pass_reads = [&](int64_t rows) {
    if (rows <= 0) return 0.0;
    const double layer = distinct_experts(s.experts, s.experts_per_token, rows);
    return static_cast<double>(slots) >= layer ? layer : reads_in_runs(s, rows, m.step_rows);
  };
  return static_cast<double>(prompt / pass) * pass_reads(pass) + pass_reads(prompt % pass);
}

// A cold prompt's seconds from its reads and its compute (budget.h).
double prompt_seconds(const BudgetShape& s, const BudgetMachine& m, const BudgetPrediction& p, double read_s,
                      double compute_s) {
  const double layers = static_cast<double>(s.moe_layers);
  const double distinct = distinct_experts(s.experts, s.experts_per_token, pass_tokens(m, p.prompt_tokens));
  const double slots = static_cast<double>(p.cache_slots);
  // The share of a layer's experts its guess can read ahead: the provider
  // gives guesses none of the slots the layer's own experts hold (none at
  // all while those do not all fit), and a quarter of the slots at most,
  // three quarters in a pass of several parts (whose next layer its parts
  // ask for whole).
  const int64_t pass = pass_tokens(m, p.prompt_tokens);
  const bool parts = m.step_rows > 0 && pass > m.step_rows;
  const double room = std::min((parts ? 0.75 : 0.25) * slots, slots - distinct);
  const double guessed = !m.prefetch || distinct <= 0 || slots <= distinct ? 0.0 : std::min(1.0, room / distinct);
  const double apart = read_s + compute_s;
  const double overlapped = std::max(read_s, compute_s) + std::min(read_s, compute_s) / layers;
  return guessed * overlapped + (1 - guessed) * apart;
}

// A decode token's compute (budget.h) at hit rate `hit` reading
// `read_bytes` (none when every expert fits): with reads, the guesses' and
// the checksums' too.
double token_compute_seconds(const BudgetShape& s, const BudgetMachine& m, double hit, double read_bytes, bool fits) {
  const double hits = m.hash_hits ? static_cast<double>(s.experts_per_token * s.moe_layers) *
                                        static_cast<double>(s.expert_bytes) * hit
                                  : 0.0;
  if (fits) return m.decode_compute_s + m.hash_s_per_byte * hits;
  return m.decode_compute_s + (m.prefetch ? m.guess_compute_s : 0.0) + m.hash_s_per_byte * (read_bytes + hits);
}

}  // namespace

double prefetch_read_factor(double predicted, double right) {
  if (!guesses_on_record(predicted) || !std::isfinite(predicted) || !std::isfinite(right)) return kPrefetchReadFactor;
  return 2.0 - std::clamp(right / predicted, 0.0, 1.0);
}

double distinct_experts(int64_t experts, int64_t per_token, int64_t tokens) {
  if (experts <= 0 || per_token <= 0 || tokens <= 0) return 0;
  const double miss = 1.0 - static_cast<double>(std::min(per_token, experts)) / static_cast<double>(experts);
  return static_cast<double>(experts) * (1.0 - std::pow(miss, static_cast<double>(tokens)));
}

double expected_hit_rate(const BudgetShape& s, uint64_t slots, const Heat& heat) {
  if (s.moe_layers <= 0 || s.experts <= 0) return 0;
  check_heat(s, heat);
  const RankedHeat ranked = ranked_heat(s, heat, {});
  return hit_rate_ranked(s, cache_at(s, slots, ranked), ranked);
}

BudgetPrediction predict_budget(const BudgetShape& s, const BudgetMachine& m, int64_t prompt_tokens) {
  if (s.expert_bytes == 0 || s.moe_layers <= 0 || s.experts <= 0 || s.experts_per_token <= 0)
    throw Error("budget: the model has no routed experts to stream");
  for (const std::vector<double>* rates : {&m.drive_gbps, &m.prompt_drive_gbps})
    for (double g : *rates)
      if (!std::isfinite(g) || g <= 0) throw Error("budget: a drive's rate must be a positive GB/s");
  if (!m.prompt_drive_gbps.empty() && m.prompt_drive_gbps.size() != m.drive_gbps.size())
    throw Error("budget: give a prompt rate for each drive, or none");
  for (double t : {m.decode_compute_s, m.prefill_compute_s, m.guess_compute_s, m.hash_s_per_byte})
    if (!std::isfinite(t) || t < 0) throw Error("budget: compute times must be finite and not negative");
  if (!std::isfinite(m.prefetch_read_factor) || m.prefetch_read_factor < 1)
    throw Error("budget: the prefetch's read factor must be at least 1");
  if (prompt_tokens < 0) throw Error("budget: a prompt has at least zero tokens");
  BudgetPrediction p;
  p.seed.total_bytes = s.total_bytes;
  p.seed.ram_bytes = m.ram_bytes;
  p.seed.hot_share = s.total_bytes ? std::min(1.0, gb(m.ram_bytes) / gb(s.total_bytes)) : 1.0;

  p.resident_bytes = s.trunk_bytes + m.other_resident;
  p.least_ram_bytes = p.resident_bytes + 2 * static_cast<uint64_t>(s.experts_per_token) * s.expert_bytes;
  const uint64_t room = m.ram_bytes > p.resident_bytes ? m.ram_bytes - p.resident_bytes : 0;
  p.cache_slots = std::min(room / s.expert_bytes, all_experts(s));
  p.fits = p.cache_slots == all_experts(s);
  p.too_small = m.ram_bytes < p.least_ram_bytes;
  check_heat(s, m.heat);
  check_heat(s, m.wrong_guesses, "the wrong guesses by expert");
  if (!m.wrong_guesses.empty() && m.heat.empty())
    throw Error("budget: wrong guesses by expert need the heat they were recorded with");
  const RankedHeat heat = ranked_heat(s, m.heat, m.wrong_guesses);
  const CacheAt cache = cache_at(s, p.cache_slots, heat);
  p.hit_rate = hit_rate_ranked(s, cache, heat);
  p.read_factor = read_factor(s, cache, p.hit_rate, heat, m.prefetch_read_factor);
  p.hit_rate_from_heat = !p.fits && std::find(heat.seen.begin(), heat.seen.end(), true) != heat.seen.end();
  const double picks = static_cast<double>(s.experts_per_token * s.moe_layers);
  p.read_per_token = p.fits ? 0
                            : static_cast<uint64_t>(picks * static_cast<double>(s.expert_bytes) * (1.0 - p.hit_rate) *
                                                    p.read_factor);
  p.prompt_tokens = prompt_tokens;
  if (m.step_rows < 0 || m.pass_rows < 0) throw Error("budget: a step or a pass has at least zero rows");
  p.prompt_read_bytes = static_cast<uint64_t>(prompt_reads(s, m, prompt_tokens, p.cache_slots) *
                                              static_cast<double>(s.moe_layers) * static_cast<double>(s.expert_bytes));

  double gbps = 0, prompt_gbps = 0;
  for (size_t d = 0; d < m.drive_gbps.size(); ++d) {
    gbps += m.drive_gbps[d];
    prompt_gbps += m.prompt_drive_gbps.empty() ? m.drive_gbps[d] : m.prompt_drive_gbps[d];
    DrivePrediction dp;
    dp.drives = static_cast<int>(d + 1);
    dp.gbps = gbps;
    dp.prompt_gbps = prompt_gbps;
    const double read_s = p.fits ? 0 : static_cast<double>(p.read_per_token) / (gbps * 1e9);
    const double compute_s =
        token_compute_seconds(s, m, p.hit_rate, static_cast<double>(p.read_per_token), p.fits);
    const double token_s = read_s + compute_s - (read_s > 0 ? read_s * compute_s / (read_s + compute_s) : 0.0);
    dp.decode_tok_s = token_s > 0 ? 1.0 / token_s : 0;  // 0: nothing to time
    dp.read_s = read_s;
    dp.compute_s = compute_s;
    dp.ttft_s = prompt_seconds(s, m, p, static_cast<double>(p.prompt_read_bytes) / (prompt_gbps * 1e9),
                               static_cast<double>(prompt_tokens) * m.prefill_compute_s);
    dp.drive_bound = read_s > compute_s;
    p.by_drives.push_back(dp);
  }

  // The least cache whose token reads take no longer than its compute (with
  // every drive): the hit rate grows with the slots, so a bisection.
  if (gbps > 0 && m.decode_compute_s > 0) {
    uint64_t lo = 0, hi = all_experts(s);
    while (lo < hi) {
      const uint64_t mid = lo + (hi - lo) / 2;
      const CacheAt at = cache_at(s, mid, heat);
      const double hit = hit_rate_ranked(s, at, heat);
      const double r = read_seconds(s, at, hit, heat, gbps, m.prefetch_read_factor);
      if (r <= token_compute_seconds(s, m, hit, r * gbps * 1e9, false))
        hi = mid;
      else
        lo = mid + 1;
    }
    p.ram_not_drive_bound = std::max(p.least_ram_bytes, p.resident_bytes + lo * s.expert_bytes);
  }

  char line[256];
  if (p.too_small)
    p.verdict = "does not fit: needs at least " + gb_text(p.least_ram_bytes) + " of RAM (the trunk, KV and buffers " +
                gb_text(p.resident_bytes) + ", and two tokens' worth of experts)";
  else if (p.fits)
    p.verdict = "fits in RAM: every expert stays once read";
  else if (!p.by_drives.empty()) {
    const DrivePrediction& all = p.by_drives.back();
    std::snprintf(line, sizeof line, "streams at ~%.2f tok/s with %d drive%s (%.0f%% of the experts a token picks in RAM)",
                  all.decode_tok_s, all.drives, all.drives == 1 ? "" : "s", 100.0 * p.hit_rate);
    p.verdict = line;
  } else
    p.verdict = "streams its experts: give the drives (--drive) for a rate";
  return p;
}

nlohmann::json budget_json(const BudgetPrediction& p) {
  nlohmann::json drives = nlohmann::json::array();
  for (const DrivePrediction& d : p.by_drives)
    drives.push_back({{"drives", d.drives},
                      {"gbps", d.gbps},
                      {"prompt_gbps", d.prompt_gbps},
                      {"decode_tok_s", d.decode_tok_s},
                      {"token_read_s", d.read_s},
                      {"token_compute_s", d.compute_s},
                      {"ttft_s", d.ttft_s},
                      {"drive_bound", d.drive_bound}});
  nlohmann::json shares = nlohmann::json::array();
  for (double s : SeedCheck::kDriveShare) shares.push_back(s);
  return {{"seed",
           {{"total_bytes", p.seed.total_bytes},
            {"ram_bytes", p.seed.ram_bytes},
            {"hot_share", p.seed.hot_share},
            {"drive_share_of_four", shares}}},
          {"resident_bytes", p.resident_bytes},
          {"least_ram_bytes", p.least_ram_bytes},
          {"cache_slots", p.cache_slots},
          {"fits", p.fits},
          {"hit_rate", p.hit_rate},
          {"hit_rate_from", p.hit_rate_from_heat ? "heat" : "uniform routing"},
          {"read_per_token_bytes", p.read_per_token},
          {"read_factor", p.read_factor},
          {"prompt_tokens", p.prompt_tokens},
          {"prompt_read_bytes", p.prompt_read_bytes},
          {"by_drives", drives},
          {"ram_not_drive_bound_bytes", p.ram_not_drive_bound},
          {"verdict", p.verdict}};
}

}  // namespace strata
