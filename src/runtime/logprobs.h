#pragma once
// Log-probabilities as OpenAI reports them: log-softmax of the model's raw
// logits (before penalties and temperature), and the most likely
// alternatives in descending order, ties to the lower id.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace strata {

struct TokenLogprobs {
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int top_n);

}  // namespace strata
