#pragma once
// Quality gate for lossy conversions: runs two models over the same token
// sequences and measures how far the second's next-token distributions are
// from the first's.
#include <cstdint>
#include <functional>
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

}  // namespace strata
