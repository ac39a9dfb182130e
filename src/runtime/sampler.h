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
//      below min_p × the top probability), and a Gumbel-max draw over the
//      tokens kept: argmax of logit / temperature + g, where g is Gumbel
//      noise that depends only on (seed, index of the output token, token
//      id) (gumbel_noise below). That is an exact draw from the renormalised
//      distribution, and the randomness of output token n never depends on
//      how many draws came before: a speculative step that samples tokens
//      n..n+k at once, with any drafter or none, picks what one-at-a-time
//      sampling picks, and a drafter can use the same noise to guess it
//      (runtime/drafter.h).
#include <cstdint>
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
  explicit Sampler(const SamplingParams& p) : params_(p) {}
  // Tokens the repetition penalty looks at besides the output (the prompt).
  void set_prompt(std::span<const int32_t> prompt);
  // Picks output token number output_count() and counts it as output.
  int32_t next(std::span<const float> logits);
  // Whether next() is argmax of the raw logits (greedy, nothing adjusting
  // them): then the largest logit, found elsewhere (a GPU), may be taken().
  bool plain_greedy() const;
  // Counts `token`, found as next() would have picked it, as output.
  void take(int32_t token);
  // The logits after the bias and the penalties (what steps 3 and 4 see).
  std::vector<float> adjusted(std::span<const float> logits) const;
  // Tokens picked so far.
  uint64_t output_count() const { return drawn_; }
  const SamplingParams& params() const { return params_; }

 private:
  bool adjusts() const;  // a bias or a penalty changes the logits
  SamplingParams params_;
  uint64_t drawn_ = 0;
  std::unordered_map<int32_t, int32_t> output_counts_;
  std::vector<uint8_t> in_prompt_;  // by token id
};

// Index of the largest logit; ties go to the lowest index.
int32_t argmax(std::span<const float> logits);

// Steps 3 and 4 on a row already biased and penalised: the token output
// number `index` of a sequence sampled with `p` (its seed, temperature and
// filters) is. Pure: the same arguments, the same token.
int32_t pick_token(std::span<const float> logits, const SamplingParams& p, uint64_t index);

// Standard Gumbel noise for (seed, output index, token id), from a counter-
// based hash: independent across its arguments, reproducible everywhere.
double gumbel_noise(uint64_t seed, uint64_t index, int32_t token);

}  // namespace strata
