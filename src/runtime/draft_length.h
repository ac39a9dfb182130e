#pragma once
// How many tokens to draft for a sequence's next step (runtime/drafter.h),
// from what was measured, so that drafting is never slower than not:
//
//   expected tokens a step yields with k drafted:  E(k) = 1 + a + ... + a^k
//     (a: the sequence's measured chance that a drafted token is accepted,
//     given the ones before it were)
//   what the step costs, relative to the step without drafts:
//                                                  C(k) = t(R + k) / t(R) + d·k
//     (R: the step's rows without drafts, one per decoding sequence;
//     t(r) = t0 + t1·r, a least-squares line through the measured times of
//     decode steps by row count: compute in RAM, extra distinct experts read
//     when streaming; d: the drafter's own time per proposed token over t(R))
//
// k maximises E(k)/C(k) over [0, max]; 0 unless that beats 1 (no drafting).
// Until two row counts have been measured, one more row is taken to cost a
// third of a one-row step. A sequence that stopped drafting tries one token
// after kProbeEvery steps, and each probe that does not lead to drafting
// doubles the wait (up to kMaxProbeEvery): a probe costs the drafter's
// catching up on every token since the last one. One that keeps drafting
// skips it for kBaselineSteps steps in a row when a baseline falls due:
// at every kBaselineEvery-th step (every 16th until steps without drafts
// have been measured at its batch size, three such early baselines at
// most per batch size), counted by begin_step, the same steps for every
// sequence (a sequence fed again after a rollback, or still in a baseline
// of its own, then waits for the next); and a
// sequence starts with such a baseline (the scheduler sets baseline_left),
// so that both the acceptance and the step without drafts stay measured.
// Only a baseline's later steps measure a step without drafts fairly: the
// first ones after drafting run with the drafter's weights in the CPU's
// caches instead of the target's (measured: twice the time of a steady
// step on the 2-core machine); the scheduler reports from the third on. d is measured on proposals that
// follow a drafting step (the scheduler's record_draft), not on probes,
// whose catching up says nothing of what drafting on costs.
//
// The model above can miss costs (a drafter's own bookkeeping, rolling a
// cache back, per-row work outside the forward). So the outcome is measured
// too: the wall time per emitted token of whole steps that drafted (after a
// drafting step) and of steps that did not (record_outcome), kept apart by
// how many sequences decoded in the step (per-token times of steps of
// different batch sizes do not compare; past kOutcomeSequences the cost
// model decides alone). Once both are measured for a batch size, drafting
// that is slower per token there than not drafting is turned off whatever
// the model says, the next probe kMaxProbeEvery steps away (a probe costs a
// catch-up and the CPU caches' refill after it); each probe while that
// holds halves the weight of the drafting measurement, so that after a few
// probes drafting runs a few steps to be measured again (conditions change:
// a stretch of code after prose); sequences probing in the same step halve
// it once. Not adaptive (benchmarks at a fixed length, tests): always max.
#include <array>
#include <cstddef>
#include <cstdint>

namespace strata {

// Per sequence: decayed counts of drafted tokens compared and accepted.
struct DraftAcceptance {
  double tried = 2, accepted = 1;  // a prior of 1/2
  int idle_steps = 0;              // steps since it last drafted
  int probe_every = 16;            // idle steps before the next probe (DraftLength::kProbeEvery, doubling)
  bool probed = false;             // the last choice was a probe
  int baseline_left = 0;           // steps still to skip in this baseline
  double rate() const { return accepted / tried; }
  // After a verification: `tried` drafted tokens compared with what the
  // model picked (the accepted ones and the first rejected), `accepted` kept.
  void record(int tried_tokens, int accepted_tokens);
};

class DraftLength {
 public:
  static constexpr int kProbeEvery = 16;
  static constexpr int kMaxProbeEvery = 256;
  static constexpr int kBaselineEvery = 64;
  static constexpr int kBaselineSteps = 6;
  static constexpr size_t kMaxRows = 256;
  static constexpr size_t kOutcomeSequences = 16;

  explicit DraftLength(int max, bool adaptive = true) : max_(max), adaptive_(adaptive) {}
  int max() const { return max_; }
  // A decode step begins: called once a step, before its choose() calls
  // (baselines fall on multiples of an interval of these).
  void begin_step() { ++step_; }
  // Tokens to draft for a sequence with this acceptance in a step of
  // `base_rows` rows without drafts, `sequences` of them decoding (updates
  // its idle count, probe wait and baseline, and the batch size's count of
  // early baselines).
  int choose(DraftAcceptance& a, size_t base_rows = 1, size_t sequences = 1);
  // A step of `rows` rows (every sequence's, all decoding) took `seconds`.
  void record_step(size_t rows, double seconds);
  // The drafter took `seconds` to propose `tokens` tokens.
  void record_draft(double seconds, int tokens);
  // A whole decode step of `sequences` decoding sequences (drafting
  // included) took `seconds` and emitted `tokens`; `drafted`: a sequence
  // drafted, after a drafting step. The scheduler reports a step without
  // drafts only as the third or later of a run of them.
  void record_outcome(bool drafted, double seconds, uint64_t tokens, size_t sequences = 1);
  // Whether drafting measured slower per emitted token than not drafting,
  // in steps of `sequences` decoding sequences.
  bool drafting_measured_slower(size_t sequences = 1) const;
  // A probe chosen by choose() ran (it had room) in a step of `sequences`:
  // while drafting measures slower there, each one halves the weight of
  // that measurement.
  void note_probe(size_t sequences = 1);
  // C(k) above for a step of `base_rows` rows.
  double cost(int k, size_t base_rows) const;
  // Samples (decayed) each side needs before the outcomes overrule the model.
  static constexpr double kOutcomeWeight = 3;

 private:
  // t(r) = t0 + t1·r; false until two row counts are measured.
  bool line(double& t0, double& t1) const;

  int max_;
  bool adaptive_;
  std::array<double, kMaxRows + 1> step_s_{};  // EMA of step time by row count
  std::array<double, kMaxRows + 1> weight_{};  // samples behind each (decayed)
  double draft_s_per_token_ = 0, draft_weight_ = 0;
  // Seconds per emitted token of whole steps, without and with drafting,
  // and the samples behind each (decayed), by sequences in the step.
  struct Outcome {
    double off_s_per_token = 0, off_weight = 0;
    double on_s_per_token = 0, on_weight = 0;
    int early_baselines = 0;        // baselines begun at the short interval
    uint64_t early_step = 0;        // the step the last of them began in
    uint64_t faded_step = 0;        // the step a probe last faded on_weight in
  };
  std::array<Outcome, kOutcomeSequences + 1> outcomes_{};
  static bool kept(size_t sequences) { return sequences >= 1 && sequences <= kOutcomeSequences; }
  uint64_t step_ = 0;  // decode steps begun
};

}  // namespace strata
