#pragma once
// Quality gate for lossy conversions: runs two models over the same token
// sequences and measures how far the second's next-token distributions are
// from the first's.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace strata {

class Model;

struct CompareReport {
  int64_t sequences = 0;
  int64_t positions = 0;
  double mean_kl = 0.0;  // mean over positions of KL(P_a ‖ P_b), nats
  double max_kl = 0.0;
  double p99_kl = 0.0;
  double top1_agreement = 0.0;  // share of positions whose argmax agrees
  double perplexity_a = 0.0;    // on the sequences' own next tokens
  double perplexity_b = 0.0;
};

// Every sequence needs at least two tokens (positions predict the next one).
// `progress`, when set, hears the positions done of all after each sequence.
CompareReport compare_models(Model& a, Model& b, const std::vector<std::vector<int32_t>>& sequences,
                             const std::function<void(int64_t done, int64_t total)>& progress = {});

// The gate (`strata compare --min-top1 X --max-kl Y`): "" when the report
// meets both thresholds given, else one line naming each that failed with
// the measured figure, e.g. "top-1 agreement 0.9375 is below --min-top1 0.99".
// --max-kl bounds the mean KL (the max over positions is one outlier).
std::string compare_gate_failure(const CompareReport& r, std::optional<double> min_top1, std::optional<double> max_kl);

}  // namespace strata
