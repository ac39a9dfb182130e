#pragma once
// Log-probabilities as OpenAI reports them: log-softmax of the model's raw
// logits (before logit_bias, penalties and temperature), and the most likely
// alternatives in descending order, ties to the lower id. What the model
// thinks, whatever the request steered: a token forced by a +100 bias reports
// the model's own (perhaps tiny) probability. OpenAI's reference does not say
// which it reports; this is vLLM's default (logprobs_mode raw_logprobs).
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
