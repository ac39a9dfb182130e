#include "runtime/sampler.h"

#include <cmath>
#include <vector>

namespace strata {

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  return best;
}

int32_t Sampler::next(std::span<const float> logits) {
  if (params_.temperature <= 0.0f) return argmax(logits);
  const float m = logits[argmax(logits)];
  std::vector<double> p(logits.size());
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    p[i] = std::exp(static_cast<double>(logits[i] - m) / params_.temperature);
    sum += p[i];
  }
  // Inverse-CDF draw in a fixed order: reproducible for a given seed.
  double u = std::uniform_real_distribution<double>(0.0, sum)(rng_);
  for (size_t i = 0; i < p.size(); ++i) {
    u -= p[i];
    if (u < 0.0) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(p.size() - 1);
}

}  // namespace strata
