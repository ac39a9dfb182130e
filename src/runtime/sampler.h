#pragma once
// Picks the next token from a row of logits; one module for the CLI and the
// server. In order (as Hugging Face's logits processors and llama.cpp's
// default chain apply them):
//   1. OpenAI's logit_bias: each listed token's bias added to its logit (first,
//      as vLLM and llama.cpp add it, so a bias counts for greedy decoding too);
//   2. penalties: repetition (prompt and output tokens: a positive logit is
//      divided by it, a negative one multiplied), then OpenAI's presence and
//      frequency (output tokens: logit -= presence·[count > 0] + frequency·count);
//   3. temperature 0 (or top_k 1): the largest logit, ties to the lowest id;
//   4. otherwise softmax(logits / temperature), then top_k, top_p (smallest
//      set of most likely tokens whose mass reaches p) and min_p (drop tokens
//      below min_p × the top probability), renormalised, and a draw from a
//      seeded generator in a fixed order: the same seed, the same output.
#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace strata {

struct SamplingParams {
  float temperature = 0.0f;
  uint64_t seed = 0;
  int32_t top_k = 0;               // 0: off
  float top_p = 1.0f;              // 1: off
  float min_p = 0.0f;              // 0: off
  float repetition_penalty = 1.0f; // 1: off
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // (token id, bias in [-100, 100]), ids ascending and distinct. Ids past the
  // logits row are the caller's to refuse (Scheduler::submit does); here they
  // are skipped.
  std::vector<std::pair<int32_t, float>> logit_bias = {};
};

// Throws strata::Error naming the parameter when a value is out of range (a
// logit_bias entry too: a negative id, ids out of order or repeated, a bias
// outside [-100, 100]).
void validate(const SamplingParams& p);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : params_(p), rng_(p.seed) {}
  // Tokens the repetition penalty looks at besides the output (the prompt).
  void set_prompt(std::span<const int32_t> prompt);
  // Picks a token and counts it as output.
  int32_t next(std::span<const float> logits);
  // The logits after the bias and the penalties (what steps 3 and 4 see).
  std::vector<float> adjusted(std::span<const float> logits) const;

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int32_t> output_counts_;
  std::vector<uint8_t> in_prompt_;  // by token id
};

// Index of the largest logit; ties go to the lowest index.
int32_t argmax(std::span<const float> logits);

}  // namespace strata
