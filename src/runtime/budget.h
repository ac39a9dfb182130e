#pragma once
// The Layer-Budget-Check (issue 21): what a model asks of a machine, as the
// system strata is modelled on estimates it and as strata predicts it.
//
// The seeds' rule, shown as published (three steps read off one machine):
//   1. total = the bytes of every weight;
//   2. hot share = usable RAM ÷ total (at most 1);
//   3. decode ≈ a reference rate scaled by the number of drives: one drive
//      52%, two 73%, three 90%, four 100% of what four give.
//
// strata's prediction, for one sequence, from the model's shapes, its own
// memory plan and the machine's measured drives and compute:
//   resident   = trunk + KV at the context + step buffers + the process;
//   cache      = RAM − resident, in whole experts (`expert_bytes` each, the
//                mean: the loader's slots take the largest);
//   hit rate h = the share of a token's picks the cache holds. k slots a
//                layer turn over with each token's misses; the rest keep
//                the most used experts (least frequently used goes first,
//                in one cache for all layers). Without a heat file every
//                expert is alike and they split evenly over the layers.
//                With one (per-layer use counts of earlier runs) they keep
//                the experts of the highest shares over all layers (a
//                layer of concentrated routing keeps its few hot ones, one
//                of even routing many: on the budget check's model b,
//                whose first layers route evenly and last ones not, this
//                took the hit rate at 2.5 GiB from 0.92 to 0.96, the runs'
//                0.96: docs/PERFORMANCE.md), so in each layer
//                h = share(its kept) + (1 − that share) · k ÷ (E − kept);
//                with k slots a layer or fewer none is kept and
//                h = slots a layer ÷ E.
//                The shares are a layer's counts shrunk towards uniform by
//                their sampling noise (empirical Bayes: a count's variance
//                under uniform routing, T · k/E · (1 − k/E) over T tokens, is
//                taken out of the counts' spread): what is left is how
//                concentrated one text's routing is. The heat file's experts
//                themselves are not assumed to be the next text's (on the
//                budget check's models the pinned ones were hit no more than
//                any others: docs/PERFORMANCE.md); the frequency counts find
//                the text's own. The heat must come from runs like the one
//                predicted: after prompts four times longer than the heat's,
//                the budget check's model b hit 3-6 points less (docs/PERFORMANCE.md).
//                Without heat, uniform routing: h = slots per
//                layer ÷ E, a floor for real routers, which favour some;
//   read/token = k · moe_layers · expert_bytes · (1 − h) · prefetch factor
//                (the next-layer prefetch's wrong guesses are read too: the
//                caller's factor, 1 without prefetch);
//   decode     from R = read ÷ (the sum of the drives' decode rates) and C = a
//                token's compute: its products and attention, and where it
//                reads, the guesses at the next layers' experts (with
//                prefetch) and the checksums of its reads (their hashing
//                takes cores from the products). A layer's experts must land
//                before its products run, but the drives read the guesses
//                while a layer computes: R + C − R·C ÷ (R + C), the reads
//                hidden in proportion to the share of the token they take
//                (what the runs of bench/budget_check.sh hid, within about a
//                millisecond a token in sixteen runs of two models:
//                docs/PERFORMANCE.md);
//   TTFT(P)    from R = (the distinct experts P tokens pick) · expert_bytes
//                ÷ the drives' prompt rates, cold (per layer E · (1 − (1 − k/E)^P)
//                distinct experts D under uniform routing), and C = P ·
//                prefill compute per token. A layer's products run on its
//                experts as they land, and each step guesses the next
//                layer's experts, which the drives read while this layer
//                computes: the two overlap but for one layer's worth of the
//                lesser, max(R, C) + min(R, C) ÷ moe_layers. The guesses get
//                none of the slots the layer's own experts hold, none while
//                those do not all fit, and at most a quarter of the cache's S
//                slots (three quarters in a pass of several steps, whose next
//                layer its steps ask for whole): a share g = min(1, min(S/4,
//                S − D) ÷ D) of a layer is read ahead (in a pass of several
//                steps min(1, min(3S/4, S − D) ÷ D); 0 when S ≤ D or without
//                prefetch), and TTFT =
//                g · that + (1 − g) · (R + C);
//   drive-bound until RAM = resident + the least cache for which a token's
//                read takes no longer than its compute.
// Every figure is in bytes and seconds (GB = 10^9 bytes where printed).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata {

// What the model's headers say.
struct BudgetShape {
  uint64_t total_bytes = 0;   // every weight: trunk and routed experts
  uint64_t trunk_bytes = 0;   // the weights that stay resident
  uint64_t expert_bytes = 0;  // one routed expert (gate, up, down), the mean
  int64_t moe_layers = 0;
  int64_t experts = 0;            // routed experts per MoE layer
  int64_t experts_per_token = 0;  // k
};

// Bytes strata's next-layer prefetch reads for each byte a decode token
// misses: its wrong guesses are read too. Measured on the budget check's
// runs (docs/PERFORMANCE.md, "strata budget's prediction"): 1.1 to 1.65,
// this is their middle, for a model without guesses on record.
inline constexpr double kPrefetchReadFactor = 1.25;

// The factor from a model's guesses on record (ExpertHeat::guesses): of
// `predicted` guessed experts, `right` were picked. A wrong guess is read
// where the cache lacks it, about as often as a pick is missed, so a miss
// costs 2 − right ÷ predicted reads (docs/PERFORMANCE.md has how close that
// came to the runs). kPrefetchReadFactor with fewer than kLeastGuesses
// (a few tokens: one of Kimi K3 guesses 91 layers x 16).
inline constexpr double kLeastGuesses = 2048;
inline bool guesses_on_record(double predicted) { return predicted >= kLeastGuesses; }  // false for NaN
double prefetch_read_factor(double predicted, double right);

// What the machine gives (measured or assumed by the caller).
struct BudgetMachine {
  uint64_t ram_bytes = 0;        // the budget for the whole process
  uint64_t other_resident = 0;   // KV at the context, step buffers, the process itself
  // Each drive's rate for a decode's expert reads, GB/s: what earlier runs'
  // decode reads got while the drive was busy (storage/drive_rates.h), else
  // its probed ceiling at the reads an expert is read in.
  std::vector<double> drive_gbps;
  // The same for a prompt's reads (they reach other depths); empty: as
  // drive_gbps.
  std::vector<double> prompt_drive_gbps;
  double decode_compute_s = 0;   // one token's compute (every product of a decode step, the pick of its token)
  double guess_compute_s = 0;    // what the guesses at the next layers' experts add to a token that reads
  double hash_s_per_byte = 0;    // what checksumming its reads adds to a token's compute, a byte
  bool hash_hits = false;        // cache hits are checksummed before each use too (--verify always)
  double prefill_compute_s = 0;  // a prompt token's share of a prefill's compute
  // Optional: per MoE layer, each expert's use count (a heat file, a trace).
  std::vector<std::vector<double>> heat;
  // Bytes read for each byte a token misses (the prefetch's wrong guesses).
  double prefetch_read_factor = 1.0;
  // Optional, with heat: per MoE layer, each expert's wrong guesses
  // (ExpertHeat::wrong). The factor's wrong part then follows the cache:
  // a wrong guess is read only where the cache lacks its expert, and the
  // most used experts the cache keeps are guessed wrongly less often than
  // they are picked, so the part grows as the cache does (prediction's
  // read_factor).
  std::vector<std::vector<double>> wrong_guesses;
  // Whether the runs guess the next layer's experts (--prefetch): without,
  // a prompt's reads and compute add up (no read-ahead between layers).
  bool prefetch = true;
  // The rows of a step (0: a prompt runs in one) and of a pass (0: as a
  // step's): a longer prompt runs in passes, each layer over a pass's steps
  // in turn (model/model.h). A pass reads a layer's experts once where the
  // cache holds that layer's distinct experts of the pass, else each step's
  // again; each pass reads its own again unless the cache holds every
  // expert of the whole prompt.
  int64_t step_rows = 0, pass_rows = 0;
};

// The seeds' three steps.
struct SeedCheck {
  uint64_t total_bytes = 0;
  uint64_t ram_bytes = 0;
  double hot_share = 0;  // ram ÷ total, at most 1
  static constexpr std::array<double, 4> kDriveShare = {0.52, 0.73, 0.90, 1.00};
};

struct DrivePrediction {
  int drives = 0;      // the first `drives` of BudgetMachine::drive_gbps
  double gbps = 0;     // their decode rates summed
  double prompt_gbps = 0;  // their prompt rates summed
  double decode_tok_s = 0;
  double read_s = 0, compute_s = 0;  // a decode token's reads (at `gbps`) and compute, before their overlap
  double ttft_s = 0;
  bool drive_bound = false;  // a token's read takes longer than its compute
};

struct BudgetPrediction {
  SeedCheck seed;
  uint64_t resident_bytes = 0;  // trunk + other_resident
  uint64_t cache_slots = 0;     // experts the RAM cache holds (all of them when it fits)
  bool fits = false;            // every expert stays in RAM: nothing is read after the first use
  bool too_small = false;       // RAM is below resident + the least cache (least_ram_bytes)
  // resident + two tokens' worth of experts: the loader's floor, but with the
  // mean expert where the loader sizes its slots by the largest (rounded to
  // 4 KiB), so it can be a little low for a model whose experts differ.
  uint64_t least_ram_bytes = 0;
  double hit_rate = 0;
  bool hit_rate_from_heat = false;
  uint64_t read_per_token = 0;  // expert bytes read from the drives per decoded token
  double read_factor = 1;       // of them, bytes read a missed byte at this cache (BudgetMachine::wrong_guesses)
  int64_t prompt_tokens = 0;
  uint64_t prompt_read_bytes = 0;  // a cold prompt's reads: its distinct experts, each pass's or step's again
  std::vector<DrivePrediction> by_drives;  // 1 .. N drives
  // With all drives, at least least_ram_bytes; 0 without drives or compute time.
  uint64_t ram_not_drive_bound = 0;
  std::string verdict;  // one line
};

// Throws strata::Error for a model without routed experts, a drive rate
// that is not a positive number, prompt rates given for some drives only, negative or non-finite compute times, or a
// negative prompt.
BudgetPrediction predict_budget(const BudgetShape& shape, const BudgetMachine& machine, int64_t prompt_tokens);

// The hit rate of a cache of `slots` experts, k a layer turning over and
// the rest holding the most used experts of any layer by the heat's shrunk
// shares (above), or, without heat, split evenly under uniform routing.
double expected_hit_rate(const BudgetShape& shape, uint64_t slots, const std::vector<std::vector<double>>& heat);

// The distinct experts `tokens` tokens pick in one layer under uniform routing.
double distinct_experts(int64_t experts, int64_t per_token, int64_t tokens);

nlohmann::json budget_json(const BudgetPrediction& p);

}  // namespace strata
