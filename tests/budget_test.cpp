// The Layer-Budget-Check's arithmetic (runtime/budget.h) against figures
// worked out by hand, in the comments beside each, for Kimi K3's published
// sizes (896 routed experts of 17.55 MB in each of 92 MoE layers, top-16,
// a ~109 GB trunk: ~1.45 TB of experts, ~25.8 GB of them a token) on a
// 128 GB machine like the one the system strata is modelled on ran it on.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/budget.h"
#include "util/error.h"

namespace strata {
namespace {

BudgetShape kimi_k3() {
  BudgetShape s;
  s.expert_bytes = 17'550'000;
  s.moe_layers = 92;
  s.experts = 896;
  s.experts_per_token = 16;
  s.trunk_bytes = 109'000'000'000;
  // 92 · 896 = 82432 experts · 17.55 MB = 1446.6816 GB, + 109 GB trunk.
  s.total_bytes = s.trunk_bytes + 82432ull * s.expert_bytes;
  return s;
}

BudgetMachine laptop() {
  BudgetMachine m;
  m.ram_bytes = 128'000'000'000;
  m.other_resident = 4'000'000'000;  // KV, buffers, the process
  m.drive_gbps = {6.5, 6.5, 6.5, 6.5};
  m.decode_compute_s = 0.2;
  m.prefill_compute_s = 0.01;
  return m;
}

TEST(Budget, KimiK3OnA128GbMachineWithFourDrives) {
  const BudgetPrediction p = predict_budget(kimi_k3(), laptop(), 512);
  // The seeds' steps: 1555.6816 GB in all; 128 / 1555.6816 = 0.08228 hot.
  EXPECT_EQ(p.seed.total_bytes, 1'555'681'600'000u);
  EXPECT_NEAR(p.seed.hot_share, 0.08228, 1e-5);
  // Resident 109 + 4 = 113 GB; 15 GB of cache = 854 experts (855 · 17.55 MB
  // = 15.005 GB does not fit); 854 / 92 per layer of 896: h = 0.010360.
  EXPECT_EQ(p.resident_bytes, 113'000'000'000u);
  EXPECT_EQ(p.cache_slots, 854u);
  EXPECT_NEAR(p.hit_rate, 0.010360, 1e-6);
  EXPECT_FALSE(p.fits);
  EXPECT_FALSE(p.too_small);
  // A token: 16 · 92 = 1472 picks · 17.55 MB = 25.8336 GB, · (1 − h) = 25.566 GB.
  EXPECT_NEAR(static_cast<double>(p.read_per_token), 25.566e9, 1e6);
  ASSERT_EQ(p.by_drives.size(), 4u);
  // One drive: R = 25.566 / 6.5 = 3.93323 s of reads, C = 0.2 s of compute,
  // R·C / (R + C) = 0.78665 / 4.13323 = 0.19032 s hidden: 3.94291 s, 0.25362
  // tok/s. Two: R = 1.96662, hidden 0.39332 / 2.16662 = 0.18154: 1.98508 s,
  // 0.50376 tok/s. Four: R = 0.98331, hidden 0.19666 / 1.18331 = 0.16620:
  // 1.01711 s, 0.98318 tok/s.
  EXPECT_NEAR(p.by_drives[0].decode_tok_s, 0.25362, 1e-5);
  EXPECT_NEAR(p.by_drives[1].decode_tok_s, 0.50376, 1e-5);
  EXPECT_NEAR(p.by_drives[3].decode_tok_s, 0.98318, 1e-5);
  EXPECT_NEAR(p.by_drives[0].read_s, 3.93323, 1e-5);
  EXPECT_DOUBLE_EQ(p.by_drives[0].compute_s, 0.2);
  EXPECT_DOUBLE_EQ(p.by_drives[3].gbps, 26.0);
  EXPECT_TRUE(p.by_drives[3].drive_bound);
  // 512 tokens pick 896 · (1 − (880/896)^512) = 895.91 experts a layer:
  // 895.91 · 92 · 17.55 MB = 1446.54 GB; ÷ 26 GB/s = 55.64 s, + 512 · 0.01 s.
  EXPECT_NEAR(static_cast<double>(p.prompt_read_bytes), 1446.54e9, 0.01e9);
  EXPECT_NEAR(p.by_drives[3].ttft_s, 60.76, 0.01);
  // Compute-bound once a token reads at most 0.2 s · 26 GB/s = 5.2 GB:
  // 1 − h ≤ 5.2 / 25.8336, h ≥ 0.79871, 82432 · 0.79871 = 65839.4 -> 65840
  // experts = 1155.492 GB, + 113 GB resident.
  EXPECT_EQ(p.ram_not_drive_bound, 1'268'492'000'000u);
  EXPECT_NE(p.verdict.find("streams at ~0.98 tok/s with 4 drives"), std::string::npos) << p.verdict;
}

// A prompt's reads overlap its compute where the cache has room to read the
// next layer ahead (the guesses: a quarter of the slots at most, none of the
// layer's own). Above, 854 slots hold less than a layer's 895.91 experts:
// no room, reads and compute add up.
TEST(Budget, APromptsReadsOverlapItsComputeWhereTheCacheReadsAhead) {
  BudgetMachine m = laptop();
  // 200 GB: 87 GB of cache = 4957 slots (4958 · 17.55 MB = 87.013 GB does
  // not fit); a quarter, 1239.25, and 4957 − 895.91 both hold a whole layer:
  // max(55.6361, 5.12) + 5.12 / 92 = 55.6918 s (R = 1446.54 GB ÷ 26 GB/s).
  m.ram_bytes = 200'000'000'000;
  BudgetPrediction p = predict_budget(kimi_k3(), m, 512);
  EXPECT_EQ(p.cache_slots, 4957u);
  EXPECT_NEAR(p.by_drives[3].ttft_s, 55.6918, 1e-3);
  // 150 GB: 37 GB = 2108 slots; a quarter, 527 of a layer's 895.91, is read
  // ahead: g = 0.588228 of 55.6918 s, the rest of 55.6361 + 5.12 = 60.7561 s:
  // 57.7771 s.
  m.ram_bytes = 150'000'000'000;
  p = predict_budget(kimi_k3(), m, 512);
  EXPECT_EQ(p.cache_slots, 2108u);
  EXPECT_NEAR(p.by_drives[3].ttft_s, 57.7771, 1e-3);
  // Compute-bound the same way: one drive reads the prompt in 222.545 s,
  // a second of compute a token makes 512 s: 512 + 222.545 / 92 = 514.419 s.
  m.ram_bytes = 200'000'000'000;
  m.prefill_compute_s = 1.0;
  p = predict_budget(kimi_k3(), m, 512);
  EXPECT_NEAR(p.by_drives[0].ttft_s, 514.419, 1e-2);
  // Without prefetch (--prefetch off) nothing is read ahead: 222.545 + 512.
  m.prefetch = false;
  p = predict_budget(kimi_k3(), m, 512);
  EXPECT_NEAR(p.by_drives[0].ttft_s, 734.545, 1e-2);
}

// A prompt longer than the planned step runs in several: each reads its own
// experts again unless the cache holds every one the prompt picks.
// (Hand-computed: distinct(n) = 896 (1 − (1 − 16/896)^n).)
TEST(Budget, APromptInSeveralStepsReadsEachStepsExperts) {
  BudgetMachine m = laptop();
  m.ram_bytes = 150'000'000'000;  // 2108 slots, far from the prompt's 82424
  m.step_rows = 200;
  BudgetPrediction p = predict_budget(kimi_k3(), m, 512);
  // Steps of 200, 200 and 112 rows: 2 · 871.6084 + 776.9114 experts a layer,
  // · 92 · 17.55 MB = 4068.999 GB, 156.49996 s at 26 GB/s; a step's layer
  // picks 871.6084, of which the guesses hold 527: g = 0.604629;
  // 0.604629 · (156.49996 + 5.12 / 92) + 0.395371 · (156.49996 + 5.12).
  EXPECT_NEAR(static_cast<double>(p.prompt_read_bytes), 4068.999e9, 1e6);
  EXPECT_NEAR(p.by_drives[3].ttft_s, 158.5579, 1e-3);
  // Where the cache holds the whole prompt's experts, they are read once.
  m.ram_bytes = 1'600'000'000'000;
  p = predict_budget(kimi_k3(), m, 512);
  EXPECT_NEAR(static_cast<double>(p.prompt_read_bytes), 1446.54e9, 0.01e9);
  // A step as wide as the prompt, or wider: one step.
  m.ram_bytes = 150'000'000'000;
  for (int64_t rows : {512, 4096}) {
    m.step_rows = rows;
    EXPECT_NEAR(static_cast<double>(predict_budget(kimi_k3(), m, 512).prompt_read_bytes), 1446.54e9, 0.01e9);
  }
}

// A pass wider than the step runs each layer over its steps in turn: where
// the cache holds a layer's distinct experts of the pass, the pass reads
// them once; otherwise each step's again. (Hand-computed as above.)
TEST(Budget, APassReadsALayersExpertsOnceWhereTheCacheHoldsThem) {
  BudgetMachine m = laptop();
  m.ram_bytes = 150'000'000'000;  // 2108 slots: a layer's 895.91 fit, the prompt's 82424 do not
  m.step_rows = 200;
  m.pass_rows = 512;
  BudgetPrediction p = predict_budget(kimi_k3(), m, 512);
  // One pass: 895.91 experts a layer once, 1446.539 GB, 55.636 s at 26 GB/s;
  // a pass of three steps guesses into three quarters of the cache at most:
  // min(1581, 2108 − 895.91 = 1212.09) slots hold its 895.91, g = 1:
  // 55.636 + 5.12 / 92 = 55.6918 s.
  // (One step of 512 rows would guess a quarter, 527: 57.7771 s, above.)
  EXPECT_NEAR(static_cast<double>(p.prompt_read_bytes), 1446.539e9, 1e6);
  EXPECT_NEAR(p.by_drives[3].ttft_s, 55.6918, 1e-3);
  // Passes of 300 and 212 rows: 891.9755 + 876.3512 experts a layer, 2855.140 GB.
  m.pass_rows = 300;
  p = predict_budget(kimi_k3(), m, 512);
  EXPECT_NEAR(static_cast<double>(p.prompt_read_bytes), 2855.140e9, 1e6);
  // 854 slots (128 GB) hold fewer than a pass's 895.91 a layer: each step's
  // own again, as steps alone (2 · 871.6084 + 776.9114 a layer).
  m.ram_bytes = 128'000'000'000;
  m.pass_rows = 512;
  p = predict_budget(kimi_k3(), m, 512);
  EXPECT_NEAR(static_cast<double>(p.prompt_read_bytes), 4068.999e9, 1e6);
  // A pass narrower than the step is the step.
  m.ram_bytes = 150'000'000'000;
  m.pass_rows = 100;
  EXPECT_NEAR(static_cast<double>(predict_budget(kimi_k3(), m, 512).prompt_read_bytes), 4068.999e9, 1e6);
}

TEST(Budget, TooLittleRamSaysWhatIsNeeded) {
  BudgetMachine m = laptop();
  m.ram_bytes = 113'500'000'000;
  const BudgetPrediction p = predict_budget(kimi_k3(), m, 512);
  // 113 GB resident + two tokens' 32 experts (0.5616 GB).
  EXPECT_TRUE(p.too_small);
  EXPECT_EQ(p.least_ram_bytes, 113'561'600'000u);
  EXPECT_EQ(p.verdict.rfind("does not fit: needs at least 113.6 GB", 0), 0u) << p.verdict;
}

TEST(Budget, EveryExpertInRamReadsNothingAfterThePrompt) {
  BudgetMachine m = laptop();
  m.ram_bytes = 2'000'000'000'000;
  const BudgetPrediction p = predict_budget(kimi_k3(), m, 512);
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.cache_slots, 82432u);
  EXPECT_DOUBLE_EQ(p.hit_rate, 1.0);
  EXPECT_EQ(p.read_per_token, 0u);
  EXPECT_DOUBLE_EQ(p.by_drives[0].decode_tok_s, 1.0 / 0.2);
  EXPECT_FALSE(p.by_drives[0].drive_bound);
  EXPECT_EQ(p.verdict, "fits in RAM: every expert stays once read");
}

// A heat file's counts: all but k of each layer's slots keep the most used
// experts over all layers (the cache is one), by the counts shrunk towards
// uniform by their sampling noise; k a layer hold any of the rest.
// (Hand-computed; budget.h has the formula.)
TEST(Budget, HeatKeepsAllButKSlotsALayerOnTheMostUsedExpertsOfAnyLayer) {
  BudgetShape s;
  s.expert_bytes = 1000;
  s.moe_layers = 2;
  s.experts = 4;
  s.experts_per_token = 1;
  const std::vector<std::vector<double>> heat = {{2, 6, 1, 1}, {1, 1, 1, 1}};
  // Layer 1: N = 10, mean 2.5, spread ((-0.5)² + 3.5² + 1.5² + 1.5²) / 4 =
  // 4.25, uniform's noise 2.5 · (1 − 1/4) = 1.875: λ = 2.375 / 4.25 =
  // 0.558824; shares 0.25 + λ (c/10 − 0.25): 0.445588, 0.222059, 0.166176 x2.
  // Layer 2: no spread, λ = 0: uniform. A layer's kept slots may hold its
  // E − k = 3 hottest; over both layers, hottest first: 0.445588 (layer 1),
  // 0.25 x3 (layer 2), 0.222059, 0.166176 (layer 1).
  // Two slots, one a layer: it turns over with each token (k = 1), none is
  // kept: 1/4 in both layers.
  EXPECT_NEAR(expected_hit_rate(s, 2, heat), 0.25, 1e-12);
  // Three: one kept, layer 1's hottest: 0.445588 + 0.554412 · 1/3 =
  // 0.630392; layer 2 turns its one over, 0.25. Mean 0.440196.
  EXPECT_NEAR(expected_hit_rate(s, 3, heat), 0.440196, 1e-6);
  // Five: three kept, layer 1's hottest and two of layer 2's (its 0.25
  // beats layer 1's second, 0.222059): layer 1 0.630392; layer 2 0.5 +
  // 0.5 · 1/2 = 0.75. Mean 0.690196 (split evenly, 2.5 a layer: 0.679485).
  EXPECT_NEAR(expected_hit_rate(s, 5, heat), 0.690196, 1e-6);
  // Four: two kept, layer 1's hottest, then one of layer 2's three equal
  // ones (0.25 a third each, a third of a slot each: one slot in all):
  // layer 1 0.630392; layer 2 0.25 + 0.75 · 1/3 = 0.5. Mean 0.565196.
  EXPECT_NEAR(expected_hit_rate(s, 4, heat), 0.565196, 1e-6);
  // k = 2: uniform's noise 2.5 · (1 − 2/4) = 1.25, λ = 3 / 4.25 = 0.705882;
  // shares 0.497059, 0.214706, 0.144118 x2; E − k = 2 keepable a layer:
  // 0.497059 (layer 1), 0.25 x2 (layer 2), 0.214706 (layer 1). Six slots,
  // two kept: layer 1's hottest and one of layer 2's two equal ones (half
  // a slot each: one in all): layer 1 0.497059 + 0.502941 · 2/3 = 0.832353;
  // layer 2 0.25 + 0.75 · 2/3 = 3/4. Mean 0.791176. Seven, three kept:
  // layer 2 keeps both, 0.5 + 0.5 · 2/2 = 1. Mean 0.916176. Two slots, one
  // a layer, fewer than k: none kept, 1/4.
  BudgetShape two = s;
  two.experts_per_token = 2;
  EXPECT_NEAR(expected_hit_rate(two, 6, heat), 0.791176, 1e-6);
  EXPECT_NEAR(expected_hit_rate(two, 7, heat), 0.916176, 1e-6);
  EXPECT_NEAR(expected_hit_rate(two, 2, heat), 0.25, 1e-12);
  // Counts no more spread than uniform routing's noise tell nothing: uniform.
  EXPECT_NEAR(expected_hit_rate(s, 2, {{3, 2, 3, 2}, {1, 1, 1, 1}}), 0.25, 1e-12);
  // Uniform layers: five slots hold 5/8 of the picks (any split of the kept
  // among uniform layers gives (kept + k)/E a layer; the even split itself
  // shows in the wrong guesses' factor, below).
  EXPECT_NEAR(expected_hit_rate(s, 5, {{1, 1, 1, 1}, {1, 1, 1, 1}}), 0.625, 1e-12);
  // Without heat, uniform: 1.5 of 4.
  EXPECT_DOUBLE_EQ(expected_hit_rate(s, 3, {}), 0.375);
  EXPECT_DOUBLE_EQ(expected_hit_rate(s, 8, heat), 1.0);
  EXPECT_THROW(expected_hit_rate(s, 2, {{1, 1, 1, 1}}), Error);
}

// The prefetch's wrong guesses are read beside the misses.
TEST(Budget, ThePrefetchsReadFactorScalesTheReads) {
  BudgetMachine m = laptop();
  m.prefetch_read_factor = 1.25;
  const BudgetPrediction p = predict_budget(kimi_k3(), m, 512);
  // 25.566 GB of misses (above) · 1.25 = 31.958 GB; one drive: R = 4.91662 s,
  // C = 0.2 s, hidden 0.98332 / 5.11662 = 0.19218 s: 4.92444 s, 0.20307 tok/s.
  EXPECT_NEAR(static_cast<double>(p.read_per_token), 31.958e9, 2e6);
  EXPECT_NEAR(p.by_drives[0].decode_tok_s, 0.20307, 1e-5);
  m.prefetch_read_factor = 0.5;
  EXPECT_THROW(predict_budget(kimi_k3(), m, 512), Error);
}

// The factor from the guesses on record: 2 − right ÷ predicted, a wrong
// guess read about as often as a pick is missed; the assumed 1.25 until
// there are 2048 guesses (the budget check's model a: 0.567 right, 1.433,
// against 1.32-1.50 read in its runs: docs/PERFORMANCE.md).
TEST(Budget, TheGuessesOnRecordGiveThePrefetchsReadFactor) {
  EXPECT_DOUBLE_EQ(prefetch_read_factor(10000, 5670), 1.433);
  EXPECT_DOUBLE_EQ(prefetch_read_factor(2048, 2048), 1.0);  // every guess right: nothing read for nothing
  EXPECT_DOUBLE_EQ(prefetch_read_factor(2048, 0), 2.0);     // none right: one wrong read a miss
  EXPECT_DOUBLE_EQ(prefetch_read_factor(2047, 100), kPrefetchReadFactor);
  EXPECT_DOUBLE_EQ(prefetch_read_factor(0, 0), kPrefetchReadFactor);
  EXPECT_DOUBLE_EQ(prefetch_read_factor(10000, 20000), 1.0);  // more right than guessed (a broken record): clamped
  EXPECT_DOUBLE_EQ(prefetch_read_factor(std::nan(""), 1), kPrefetchReadFactor);
}

// With the wrong guesses by expert on record, their part of the factor
// follows the cache: a wrong guess is read only where the cache lacks its
// expert. (Hand-computed: budget.cpp's read_factor.)
TEST(Budget, WrongGuessesByExpertScaleTheFactorByWhatTheCacheLacks) {
  BudgetShape s;
  s.expert_bytes = 1000;
  s.moe_layers = 2;
  s.experts = 4;
  s.experts_per_token = 1;
  s.trunk_bytes = 100'000;
  s.total_bytes = s.trunk_bytes + 8 * s.expert_bytes;
  BudgetMachine m;
  m.other_resident = 20'000;
  m.ram_bytes = 125'000;  // five slots
  m.drive_gbps = {1.0};
  m.decode_compute_s = 0.001;
  m.heat = {{2, 6, 1, 1}, {1, 1, 1, 1}};
  m.prefetch_read_factor = 1.4;
  const BudgetPrediction before = predict_budget(s, m, 16);
  ASSERT_EQ(before.cache_slots, 5u);
  EXPECT_NEAR(before.hit_rate, 0.690196, 1e-6);  // as above
  EXPECT_DOUBLE_EQ(before.read_factor, 1.4);     // none by expert: the machine's
  // Layer 1's wrong guesses named its two coldest experts (3 and 1 of them),
  // layer 2's each alike. Five slots: layer 1 keeps one, layer 2 two (as
  // above), k = 1 turning over in each. Layer 1 in the picks' order (6, 2,
  // 1, 1) has wrong shares 0, 0, 0.75, 0.25: the kept hold none, the
  // turning-over slot 1/3 of them, 2/3 missed. Layer 2: 0.5 kept + 0.5 · 1/2
  // = 0.75 held, 0.25 missed. Of 8 wrong guesses 4 · 2/3 + 4 · 0.25 =
  // 3.666667 missed, 0.458333, against the picks' 0.309804: 1 + 0.4 ·
  // 0.458333 / 0.309804 = 1.591772; read 2 · 1000 · 0.309804 · 1.591772 =
  // 986.27 bytes a token.
  m.wrong_guesses = {{0, 0, 3, 1}, {1, 1, 1, 1}};
  const BudgetPrediction p = predict_budget(s, m, 16);
  EXPECT_NEAR(p.read_factor, 1.591772, 1e-6);
  EXPECT_NEAR(static_cast<double>(p.read_per_token), 986.27, 1.0);
  // Wrong guesses spread as the picks (uniform both): the machine's factor.
  // (Only where the layers' equal shares split the kept slots evenly: all
  // three kept in layer 1 would give 1 + 0.4 · 0.25 / 0.375 = 1.266667.)
  m.heat = {{1, 1, 1, 1}, {1, 1, 1, 1}};
  m.wrong_guesses = {{2, 2, 2, 2}, {1, 1, 1, 1}};
  EXPECT_NEAR(predict_budget(s, m, 16).read_factor, 1.4, 1e-12);
  // Every expert fits: nothing is read, the factor as given.
  m.ram_bytes = 1'000'000;
  EXPECT_DOUBLE_EQ(predict_budget(s, m, 16).read_factor, 1.4);
  // Shapes that are not the model's, or wrong guesses without their heat.
  m.wrong_guesses = {{1, 1, 1, 1}};
  EXPECT_THROW(predict_budget(s, m, 16), Error);
  m.wrong_guesses = {{0, 0, 3, 1}, {1, 1, 1, 1}};
  m.heat.clear();
  EXPECT_THROW(predict_budget(s, m, 16), Error);
}

// A token that reads computes more: the guesses at the next layers'
// experts (with prefetch) and the checksums of its reads, and of its cache
// hits too under --verify always. A token whose experts all fit: only the
// latter.
TEST(Budget, AReadingTokensComputeCountsItsGuessesAndChecksums) {
  BudgetMachine m = laptop();
  m.drive_gbps = {6.5};
  m.guess_compute_s = 0.05;
  m.hash_s_per_byte = 1e-12;  // 1 ms a GB
  BudgetPrediction p = predict_budget(kimi_k3(), m, 512);
  // 0.2 + 0.05 + 25.566 GB · 1 ms = 0.275566 s; R = 3.93323 s, hidden
  // 1.08387 / 4.20880 = 0.25753: 3.95127 s, 0.25308 tok/s.
  EXPECT_NEAR(p.by_drives[0].compute_s, 0.275566, 1e-6);
  EXPECT_NEAR(p.by_drives[0].decode_tok_s, 0.25308, 1e-5);
  m.prefetch = false;  // no guesses
  EXPECT_NEAR(predict_budget(kimi_k3(), m, 512).by_drives[0].compute_s, 0.225566, 1e-6);
  m.prefetch = true;
  m.hash_hits = true;  // and the hits: 25.8336 GB picked · h 0.010360 = 0.26764 GB more
  EXPECT_NEAR(predict_budget(kimi_k3(), m, 512).by_drives[0].compute_s, 0.275834, 1e-6);
  m.ram_bytes = 2'000'000'000'000;  // every expert fits: no reads, no guesses; every pick hashed
  p = predict_budget(kimi_k3(), m, 512);
  ASSERT_TRUE(p.fits);
  EXPECT_NEAR(p.by_drives[0].compute_s, 0.2 + 0.0258336, 1e-6);
  EXPECT_DOUBLE_EQ(p.by_drives[0].read_s, 0.0);
  m.hash_hits = false;
  EXPECT_DOUBLE_EQ(predict_budget(kimi_k3(), m, 512).by_drives[0].decode_tok_s, 1.0 / 0.2);
  m.guess_compute_s = -1;
  EXPECT_THROW(predict_budget(kimi_k3(), m, 512), Error);
}

// A prompt's reads are timed at the drives' prompt rates (what earlier
// runs' prompts got), a decode's at their decode rates: each prediction is
// the one all drives at that rate give.
TEST(Budget, APromptsReadsAreTimedAtThePromptRates) {
  BudgetMachine m = laptop();
  m.drive_gbps = {6.5, 6.5};
  m.prompt_drive_gbps = {3.0, 2.0};
  const BudgetPrediction p = predict_budget(kimi_k3(), m, 512);
  BudgetMachine decode_only = m, prompt_only = m;
  decode_only.prompt_drive_gbps.clear();
  prompt_only.drive_gbps = {3.0, 2.0};
  prompt_only.prompt_drive_gbps.clear();
  const BudgetPrediction d = predict_budget(kimi_k3(), decode_only, 512);
  const BudgetPrediction q = predict_budget(kimi_k3(), prompt_only, 512);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(p.by_drives[i].decode_tok_s, d.by_drives[i].decode_tok_s);
    EXPECT_EQ(p.by_drives[i].ttft_s, q.by_drives[i].ttft_s);
    EXPECT_NE(p.by_drives[i].ttft_s, d.by_drives[i].ttft_s);
  }
  EXPECT_EQ(p.by_drives[1].gbps, 13.0);
  EXPECT_EQ(p.by_drives[1].prompt_gbps, 5.0);
  EXPECT_EQ(p.ram_not_drive_bound, d.ram_not_drive_bound);
  m.prompt_drive_gbps = {3.0};  // not one a drive
  EXPECT_THROW(predict_budget(kimi_k3(), m, 512), Error);
  m.prompt_drive_gbps = {3.0, 0.0};
  EXPECT_THROW(predict_budget(kimi_k3(), m, 512), Error);
}

TEST(Budget, DistinctExpertsOfAPrompt) {
  EXPECT_DOUBLE_EQ(distinct_experts(8, 2, 1), 2.0);
  // Two tokens of top-2 of 8: 8 · (1 − (6/8)^2) = 3.5.
  EXPECT_DOUBLE_EQ(distinct_experts(8, 2, 2), 3.5);
  EXPECT_DOUBLE_EQ(distinct_experts(8, 2, 0), 0.0);
  EXPECT_NEAR(distinct_experts(8, 2, 1000), 8.0, 1e-9);
}

TEST(Budget, JsonCarriesTheFigures) {
  const nlohmann::json j = budget_json(predict_budget(kimi_k3(), laptop(), 512));
  EXPECT_EQ(j["cache_slots"], 854);
  EXPECT_EQ(j["by_drives"].size(), 4u);
  EXPECT_EQ(j["seed"]["drive_share_of_four"][0], 0.52);
  EXPECT_EQ(j["hit_rate_from"], "uniform routing");
}

TEST(Budget, AModelWithoutRoutedExpertsIsAClearError) {
  BudgetShape s = kimi_k3();
  s.experts = 0;
  EXPECT_THROW(predict_budget(s, laptop(), 1), Error);
}

TEST(Budget, ImpossibleMachineFiguresAreClearErrors) {
  BudgetMachine m = laptop();
  m.drive_gbps = {6.5, 0.0};
  EXPECT_THROW(predict_budget(kimi_k3(), m, 1), Error);
  m = laptop();
  m.decode_compute_s = -1;
  EXPECT_THROW(predict_budget(kimi_k3(), m, 1), Error);
  EXPECT_THROW(predict_budget(kimi_k3(), laptop(), -1), Error);
  // Heat of another model's shape.
  BudgetShape s;
  s.expert_bytes = 1000;
  s.moe_layers = 1;
  s.experts = 4;
  s.experts_per_token = 1;
  EXPECT_THROW(expected_hit_rate(s, 1, {{1, 1, 1, 1, 1}}), Error);
  EXPECT_THROW(expected_hit_rate(s, 8, {{1, 1, 1}}), Error);
}

// Slow compute: even an empty cache leaves the drives waiting on it, and the
// answer is the least RAM that loads (113 GB + 32 experts), not below it.
TEST(Budget, ComputeBoundAtOnceIsTheLeastRamThatLoads) {
  BudgetMachine m = laptop();
  m.decode_compute_s = 2.0;  // > 25.8336 GB / 26 GB/s = 0.99 s with no hit at all
  const BudgetPrediction p = predict_budget(kimi_k3(), m, 1);
  EXPECT_EQ(p.ram_not_drive_bound, 113'561'600'000u);
  EXPECT_FALSE(p.by_drives[3].drive_bound);
}

}  // namespace
}  // namespace strata
