#pragma once
// One sequence through the scheduler (runtime/scheduler.h), as `strata
// generate` and the tests run it: prefill the prompt (in chunks of
// max_batch_rows), then decode token by token until max_new_tokens, a stop
// token or the context; with timings and expert counters for prefill and
// decode apart.
#include <cstdint>
#include <functional>
#include <vector>

#include "model/expert_provider.h"
#include "runtime/request.h"
#include "runtime/sampler.h"
#include "runtime/session.h"

namespace strata {

class Model;
class Drafter;
class RouteTrace;

struct GenerateOptions {
  int max_new_tokens = 16;
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;  // generation ends after emitting one
  bool keep_logits = false;          // keep each chosen token's logits row
  // Called on the calling thread as each token is decided, before the next
  // step runs (the event's text is empty: no tokenizer is handed in).
  std::function<void(const TokenEvent&)> on_token;
  // Called after each prefill step: prompt tokens in the cache, of `total`.
  std::function<void(int64_t done, int64_t total)> on_prefill;
  // Speculative decoding (runtime/drafter.h); the output is the same without.
  Drafter* drafter = nullptr;
  int draft_max = 8;
  bool draft_adaptive = true;  // false: draft_max tokens every step
  RouteTrace* trace = nullptr;  // router traces (runtime/route_trace.h)
};

struct GenerateResult {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // one row per generated token
  int64_t prompt_tokens = 0;
  double prefill_s = 0.0;
  double decode_s = 0.0;  // time for tokens after the first
  bool context_full = false;   // stopped because the context (--ctx) was reached
  int64_t reused_tokens = 0;   // prompt tokens taken from the session's cache
  // Expert streaming during prefill (+ first token) and during decode.
  ExpertStats prefill_experts, decode_experts;
  // Speculation: tokens drafted and fed, of those kept; seconds in the drafter.
  int64_t drafted_tokens = 0, accepted_tokens = 0, draft_steps = 0;
  double draft_s = 0;
};

// Throws what the scheduler's submit() throws for a bad request, and
// rethrows whatever ended the sequence with an error.
GenerateResult generate(Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& options);
// The same, reusing `session`'s cache for the prompt's leading tokens it
// holds; afterwards `session` holds this sequence (prompt + generated, and
// for a model with recurrent state the cache at the prompt's end).
GenerateResult generate(Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                        Session& session);

// The process's peak resident set size in bytes.
int64_t peak_rss_bytes();

}  // namespace strata
