#pragma once
// Picks the next token from a row of logits: greedy at temperature 0,
// otherwise a draw from softmax(logits / temperature) with a seeded generator
// so the same seed gives the same output.
#include <cstdint>
#include <random>
#include <span>

namespace strata {

struct SamplingParams {
  float temperature = 0.0f;
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : params_(p), rng_(p.seed) {}
  int32_t next(std::span<const float> logits);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

// Index of the largest logit; ties go to the lowest index.
int32_t argmax(std::span<const float> logits);

}  // namespace strata
