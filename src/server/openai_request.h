#pragma once
// Validating OpenAI request bodies (/v1/completions, /v1/chat/completions):
// every field is checked for type and range, and anything wrong becomes an
// ApiError with OpenAI's error type and the offending parameter.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/sampler.h"

namespace strata {

struct ApiError {
  ApiError(int s, std::string m, std::string t = "invalid_request_error", std::string p = {}, std::string c = {})
      : status(s), message(std::move(m)), type(std::move(t)), param(std::move(p)), code(std::move(c)) {}
  int status;
  std::string message, type, param, code;
};

struct ParsedRequest {
  // completions: text, or ids given directly; chat: messages (+ tools).
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  // Kept in the request's key order: templates print dicts with tojson, and
  // Python keeps insertion order.
  nlohmann::ordered_json messages, tools, template_kwargs;
  std::string rendered;  // chat: the template's output
  int max_tokens = 0;    // 0: not given
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool stream = false, include_usage = false;
  bool logprobs = false;
  int top_logprobs = 0;
  bool ignore_eos = false;
};

// Throws ApiError. `model` is the served model's id (a request naming another
// model gets 404); `max_tokens_limit` bounds max_tokens.
ParsedRequest parse_request(const std::string& body, bool chat, const std::string& model, int max_tokens_limit);

}  // namespace strata
