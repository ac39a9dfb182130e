#include "runtime/draft_length.h"

#include <algorithm>
#include <cmath>

namespace strata {

namespace {
// What one more row costs before any step was measured: about what a 4-row
// step costing 2x a 1-row one gives (docs/PERFORMANCE.md).
constexpr double kPriorRowCost = 0.33;
constexpr double kDecay = 0.9;
}  // namespace

void DraftAcceptance::record(int drafted, int accepted_tokens) {
  if (drafted <= 0) return;
  // Tokens tried: each accepted one, and the first rejected if any.
  const int tried_now = accepted_tokens < drafted ? accepted_tokens + 1 : accepted_tokens;
  tried = kDecay * tried + tried_now;
  accepted = kDecay * accepted + accepted_tokens;
}

void DraftLength::record_step(size_t rows, double seconds) {
  if (rows == 0 || rows > kMaxRows || !(seconds > 0)) return;
  double& w = weight_[rows];
  step_s_[rows] = (step_s_[rows] * w * kDecay + seconds) / (w * kDecay + 1);
  w = w * kDecay + 1;
}

void DraftLength::record_draft(double seconds, int tokens) {
  if (tokens <= 0 || !(seconds >= 0)) return;
  const double per = seconds / tokens;
  draft_s_per_token_ = (draft_s_per_token_ * draft_weight_ * kDecay + per) / (draft_weight_ * kDecay + 1);
  draft_weight_ = draft_weight_ * kDecay + 1;
}

double DraftLength::row_cost() const {
  if (weight_[1] == 0) return kPriorRowCost;
  // Each measured row count r > 1 says (t_r / t_1 - 1) / (r - 1); weigh by samples.
  double sum = 0, w = 0;
  for (size_t r = 2; r <= kMaxRows; ++r) {
    if (weight_[r] == 0) continue;
    const double ww = std::min(weight_[r], weight_[1]);
    sum += ww * (step_s_[r] / step_s_[1] - 1) / static_cast<double>(r - 1);
    w += ww;
  }
  // Blend with the prior until there are a few measurements.
  return (sum + kPriorRowCost) / (w + 1);
}

double DraftLength::draft_cost() const {
  if (weight_[1] == 0 || draft_weight_ == 0) return 0;
  return draft_s_per_token_ / step_s_[1];
}

int DraftLength::choose(DraftAcceptance& a) const {
  if (max_ <= 0 || !adaptive_) return max_;
  const double rate = std::clamp(a.rate(), 0.0, 0.999);
  const double cost = std::max(0.0, row_cost()) + draft_cost();
  int best = 0;
  double best_value = 1.0, expected = 1.0, term = 1.0;
  for (int k = 1; k <= max_; ++k) {
    term *= rate;
    expected += term;
    const double value = expected / (1 + cost * k);
    if (value > best_value * (1 + 1e-9)) {
      best = k;
      best_value = value;
    }
  }
  if (best == 0 && ++a.idle_steps >= kProbeEvery) best = 1;
  if (best > 0) a.idle_steps = 0;
  return best;
}

}  // namespace strata
