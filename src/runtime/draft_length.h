#pragma once
// How many tokens to draft for a sequence's next step (runtime/drafter.h),
// from what was measured, so that drafting is never slower than not:
//
//   expected tokens a step yields with k drafted:  E(k) = 1 + a + ... + a^k
//     (a: the sequence's measured chance that a drafted token is accepted,
//     given the ones before it were)
//   what the step costs, relative to one row:     C(k) = 1 + (c + d)·k
//     (c: what one more row adds to a step, from the measured time of steps
//     by row count: compute in RAM, extra distinct experts read when
//     streaming; d: the drafter's own time per proposed token)
//
// k maximises E(k)/C(k) over [0, max]; 0 unless that beats 1 (no drafting).
// Not adaptive (benchmarks at a fixed length, tests): always max.
// A sequence that stopped drafting tries one token again every
// kProbeEvery steps, so a changed acceptance is noticed.
#include <array>
#include <cstddef>

namespace strata {

// Per sequence: decayed counts of drafted tokens tried and accepted.
struct DraftAcceptance {
  double tried = 2, accepted = 1;  // a prior of 1/2
  int idle_steps = 0;              // steps since it last drafted
  double rate() const { return accepted / tried; }
  // After a verification: `drafted` tokens fed, the first `accepted` kept.
  void record(int drafted, int accepted_tokens);
};

class DraftLength {
 public:
  static constexpr int kProbeEvery = 16;
  static constexpr size_t kMaxRows = 64;

  explicit DraftLength(int max, bool adaptive = true) : max_(max), adaptive_(adaptive) {}
  int max() const { return max_; }
  // Tokens to draft for a sequence with this acceptance (updates its idle count).
  int choose(DraftAcceptance& a) const;
  // A step of `rows` rows (every sequence's, all decoding) took `seconds`.
  void record_step(size_t rows, double seconds);
  // The drafter took `seconds` to propose `tokens` tokens.
  void record_draft(double seconds, int tokens);
  // c and d above, as estimated now.
  double row_cost() const;
  double draft_cost() const;

 private:
  int max_;
  bool adaptive_;
  std::array<double, kMaxRows + 1> step_s_{};  // EMA of step time by row count
  std::array<double, kMaxRows + 1> weight_{};  // samples behind each (decayed)
  double draft_s_per_token_ = 0, draft_weight_ = 0;
};

}  // namespace strata
