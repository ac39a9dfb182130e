#pragma once
// Validating OpenAI request bodies (/v1/completions, /v1/chat/completions):
// every field is checked for type and range, and anything wrong becomes an
// ApiError with OpenAI's error type and the offending parameter. Integers
// are range-checked as written, before any conversion: 2^64-1 is out of
// range for a seed, never wrapped to -1. Which
// fields each endpoint takes, and what happens to those strata does not
// implement, is server/openai_fields.h. A body nested deeper than
// kMaxBodyDepth is refused before it is parsed (util/json_depth.h).
//
// Choices where OpenAI's reference leaves room:
// - logit_bias: {"token id": bias}, the id a decimal integer as the client
//   libraries write it (no sign, no leading zeros: one spelling per id), below
//   the model's vocabulary (its logits row, which may be longer than the
//   tokenizer's); the bias a number in [-100, 100]. It steers sampling and
//   greedy decoding alike; reported logprobs stay the model's (runtime/logprobs.h).
// - tool_choice: "auto" is what strata does anyway; "none" with tools is
//   passed to the chat encoding as the tool_choice template kwarg (a Jinja
//   template is then not shown the tools; Kimi K3's encoder keeps them and
//   adds its "do not call tools" note: runtime/prompt.h); "required" and a
//   named function are a 400 until decoding can be constrained to a call.
// - response_format: {"type": "text"} only; json_object and json_schema are a
//   400 until decoding can be constrained to JSON.
#include <cstddef>
#include <cstdint>
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
  bool draft = true;  // strata's extension: false keeps this request out of speculative decoding
};

// What a request is checked against.
struct ServedModel {
  std::string name;          // the served model's id: a request naming another gets 404
  int max_tokens_limit = 0;  // bounds max_tokens
  int64_t vocab_size = 0;    // the model's logits row: prompt and logit_bias ids must be below it
  int64_t context = 0;       // a prompt of more token ids, or a chat of more messages, cannot fit (0: no bound)
};

// Bodies nesting deeper than this are refused unparsed (serde_json's default
// limit; a tool's JSON schema needs a fraction of it).
inline constexpr size_t kMaxBodyDepth = 128;

// Bodies with more JSON values than the context (a prompt of token ids, or
// of messages, filling it) and this many more are refused unparsed.
inline constexpr size_t kBodyValuesBeyondContext = 1 << 16;

// Throws ApiError.
ParsedRequest parse_request(const std::string& body, bool chat, const ServedModel& served);

}  // namespace strata
