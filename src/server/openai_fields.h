#pragma once
// The top-level fields a request body may carry, per endpoint, as OpenAI's
// API reference lists them for POST /v1/chat/completions and
// /v1/completions (the official clients' CreateParams), each in one of four
// kinds:
// - read: strata implements it; parse_request checks and uses it. vLLM's
//   extensions strata reads (top_k, min_p, repetition_penalty, ignore_eos,
//   chat_template_kwargs, max_completion_tokens on completions) are read too;
// - accepted: OpenAI's, changing nothing strata produces (user, metadata,
//   store, service_tier, ...): accepted, ignored;
// - only at its default: OpenAI's, would change the output, not implemented
//   (audio, echo, best_of, ...): its default value or null is accepted,
//   anything else is a 400 naming the field;
// - anything else: a 400 "Unrecognized request argument supplied: X"
//   (several: "Unrecognized request arguments supplied: a, b"), OpenAI's
//   words; `param` names the field where OpenAI leaves it null.
// A field that is read but only partly implemented (n > 1, response_format
// json_object, tool_choice "required") is parse_request's 400.
#include <nlohmann/json.hpp>

namespace strata {

// Throws ApiError (server/openai_request.h) for the first problem.
void check_fields(const nlohmann::json& body, bool chat);

}  // namespace strata
