#include "runtime/draft_length.h"

#include <algorithm>
#include <cmath>

namespace strata {

namespace {
// What one more row costs, as a share of a one-row step, before two row
// counts were measured: about what a 4-row step costing 2x a 1-row one gives
// (docs/PERFORMANCE.md).
constexpr double kPriorRowCost = 0.33;
constexpr double kDecay = 0.9;
}  // namespace

static_assert(DraftAcceptance{}.probe_every == DraftLength::kProbeEvery);

void DraftAcceptance::record(int tried_tokens, int accepted_tokens) {
  if (tried_tokens <= 0) return;
  tried = kDecay * tried + tried_tokens;
  accepted = kDecay * accepted + accepted_tokens;
}

void DraftLength::record_step(size_t rows, double seconds) {
  if (rows == 0 || rows > kMaxRows || !(seconds > 0) || !std::isfinite(seconds)) return;
  double& w = weight_[rows];
  step_s_[rows] = (step_s_[rows] * w * kDecay + seconds) / (w * kDecay + 1);
  w = w * kDecay + 1;
}

void DraftLength::record_draft(double seconds, int tokens) {
  if (tokens <= 0 || !(seconds >= 0) || !std::isfinite(seconds)) return;
  const double per = seconds / tokens;
  draft_s_per_token_ = (draft_s_per_token_ * draft_weight_ * kDecay + per) / (draft_weight_ * kDecay + 1);
  draft_weight_ = draft_weight_ * kDecay + 1;
}

void DraftLength::record_outcome(bool drafted, double seconds, uint64_t tokens, size_t sequences) {
  if (tokens == 0 || !(seconds > 0) || !std::isfinite(seconds) || !kept(sequences)) return;
  Outcome& o = outcomes_[sequences];
  const double per = seconds / static_cast<double>(tokens);
  double& mean = drafted ? o.on_s_per_token : o.off_s_per_token;
  double& w = drafted ? o.on_weight : o.off_weight;
  mean = (mean * w * kDecay + per) / (w * kDecay + 1);
  w = w * kDecay + 1;
}

bool DraftLength::drafting_measured_slower(size_t sequences) const {
  if (!kept(sequences)) return false;
  const Outcome& o = outcomes_[sequences];
  return o.on_weight >= kOutcomeWeight && o.off_weight >= kOutcomeWeight && o.on_s_per_token > o.off_s_per_token;
}

void DraftLength::note_probe(size_t sequences) {
  // Where the outcome said no, it fades at each probe: after a few,
  // drafting runs a few steps to be measured again.
  // Once a step: sequences refused together probe together.
  if (!drafting_measured_slower(sequences)) return;
  Outcome& o = outcomes_[sequences];
  if (o.faded_step == step_ && step_ > 0) return;
  o.faded_step = step_;
  o.on_weight *= 0.5;
}

bool DraftLength::line(double& t0, double& t1) const {
  double w = 0, r = 0, t = 0;
  int counts = 0;
  for (size_t i = 1; i <= kMaxRows; ++i)
    if (weight_[i] > 0) {
      w += weight_[i];
      r += weight_[i] * static_cast<double>(i);
      t += weight_[i] * step_s_[i];
      ++counts;
    }
  if (counts < 2) return false;
  r /= w;
  t /= w;
  double srr = 0, srt = 0;
  for (size_t i = 1; i <= kMaxRows; ++i)
    if (weight_[i] > 0) {
      const double dr = static_cast<double>(i) - r;
      srr += weight_[i] * dr * dr;
      srt += weight_[i] * dr * (step_s_[i] - t);
    }
  t1 = std::max(0.0, srt / srr);
  t0 = t - t1 * r;
  return true;
}

double DraftLength::cost(int k, size_t base_rows) const {
  const double R = static_cast<double>(std::max<size_t>(1, base_rows));
  double t0 = 0, t1 = 0, base = 0;
  if (line(t0, t1) && (base = t0 + t1 * R) > 0) {
    const double d = draft_weight_ > 0 ? draft_s_per_token_ / base : 0;
    return (base + t1 * k) / base + d * k;
  }
  // One row costs 1; each more, kPriorRowCost.
  const double one = 1 + kPriorRowCost * (R - 1);
  return (one + kPriorRowCost * k) / one;
}

int DraftLength::choose(DraftAcceptance& a, size_t base_rows, size_t sequences) {
  if (max_ <= 0 || !adaptive_) return max_;
  if (a.baseline_left > 0) {  // measuring steps without drafts
    --a.baseline_left;
    return 0;
  }
  const double rate = std::clamp(a.rate(), 0.0, 0.999);
  int best = 0;
  double best_value = 1.0, expected = 1.0, term = 1.0;
  for (int k = 1; k <= max_; ++k) {
    term *= rate;
    expected += term;
    const double value = expected / cost(k, base_rows);
    if (value > best_value * (1 + 1e-9)) {
      best = k;
      best_value = value;
    }
  }
  // What was measured overrules the model; then probes come at the longest
  // wait at once (each costs a catch-up, and the caches' refill after it).
  const bool refused = best > 0 && drafting_measured_slower(sequences);
  if (refused) best = 0;
  if (best == 0) {
    if (a.probed) a.probe_every = std::min(2 * a.probe_every, kMaxProbeEvery);  // it did not pay: wait longer
    if (refused) a.probe_every = kMaxProbeEvery;
    a.probed = false;
    if (++a.idle_steps >= a.probe_every) {  // try again now and then
      best = 1;
      a.probed = true;

    }
  } else {
    a.probed = false;
    a.probe_every = kProbeEvery;
    // Until steps without drafts are measured at this batch size, at every
    // 16th step (three times at most); then at every kBaselineEvery-th. The
    // same steps for every sequence: a step in which none drafts measures.
    Outcome* o = kept(sequences) ? &outcomes_[sequences] : nullptr;
    const bool early = o && o->off_weight < kOutcomeWeight && (o->early_baselines < 3 || o->early_step == step_);
    if (step_ > 0 && step_ % (early ? 16 : kBaselineEvery) == 0) {
      best = 0;  // measure the step without drafts now and then
      a.baseline_left = kBaselineSteps - 1;
      if (early && o->early_step != step_) {
        o->early_step = step_;
        ++o->early_baselines;
      }
    }
  }
  if (best > 0) a.idle_steps = 0;
  return best;
}

}  // namespace strata
