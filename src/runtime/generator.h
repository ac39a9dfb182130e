#pragma once
// The step loop for one sequence: prefill the prompt as one batch, then
// decode token by token until max_new_tokens or a stop token.
#include <cstdint>
#include <vector>

#include "model/expert_provider.h"
#include "runtime/sampler.h"
#include "runtime/session.h"

namespace strata {

class Model;

struct GenerateOptions {
  int max_new_tokens = 16;
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;  // generation ends after emitting one
  bool keep_logits = false;          // keep each chosen token's logits row
};

struct GenerateResult {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // one row per generated token
  int64_t prompt_tokens = 0;
  double prefill_s = 0.0;
  double decode_s = 0.0;  // time for tokens after the first
  bool context_full = false;
  int64_t reused_tokens = 0;  // prompt tokens taken from the session's cache  // stopped because the context (--ctx) was reached
  // Expert streaming during prefill (+ first token) and during decode.
  ExpertStats prefill_experts, decode_experts;
};

GenerateResult generate(Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& options);
// The same, reusing `session`'s cache for the prompt's leading tokens it
// holds; afterwards `session` holds this sequence (prompt + generated).
GenerateResult generate(Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                        Session& session);

// The process's peak resident set size in bytes.
int64_t peak_rss_bytes();

}  // namespace strata
