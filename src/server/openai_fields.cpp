#include "server/openai_fields.h"

#include <string>
#include <string_view>
#include <vector>

#include "server/openai_request.h"

namespace strata {

namespace {

using json = nlohmann::json;

enum class Kind { Read, Accepted, DefaultOnly };

struct Field {
  std::string_view name;
  Kind kind;
  // DefaultOnly: whether `value` (never null: null is accepted as absent)
  // asks for nothing beyond what strata does; `body` for fields that depend
  // on another.
  bool (*is_default)(const json& value, const json& body) = nullptr;
  const char* unsupported = nullptr;  // DefaultOnly: why anything else is refused
};

bool is_false(const json& v, const json&) { return v == false; }
bool is_one(const json& v, const json&) { return v.is_number_integer() && v == 1; }
bool is_empty_string(const json& v, const json&) { return v == ""; }
bool is_empty_array(const json& v, const json&) { return v.is_array() && v.empty(); }
bool is_text_only(const json& v, const json&) { return v == json::array({"text"}); }
bool is_medium(const json& v, const json&) { return v == "medium"; }
bool is_none_or_auto(const json& v, const json&) { return v == "none" || v == "auto"; }
bool never(const json&, const json&) { return false; }
// Several tool calls in one reply are what a model does unprompted; one at
// most would need decoding to stop it. Without tools the flag means nothing.
bool parallel_or_no_tools(const json& v, const json& body) {
  const bool tools = body.contains("tools") && body["tools"].is_array() && !body["tools"].empty();
  return v == true || !tools;
}

// Kept in the order of OpenAI's reference (the openai clients' CreateParams).
const std::vector<Field>& chat_fields() {
  static const std::vector<Field> f = {
      {"messages", Kind::Read},
      {"model", Kind::Read},
      {"audio", Kind::DefaultOnly, never, "audio output is not supported: strata answers in text"},
      {"frequency_penalty", Kind::Read},
      {"function_call", Kind::DefaultOnly, is_none_or_auto,
       "only 'none' and 'auto' are supported (the deprecated functions are not)"},
      {"functions", Kind::DefaultOnly, is_empty_array, "the deprecated functions are not supported; use tools"},
      {"logit_bias", Kind::Read},
      {"logprobs", Kind::Read},
      {"max_completion_tokens", Kind::Read},
      {"max_tokens", Kind::Read},
      {"metadata", Kind::Accepted},
      {"modalities", Kind::DefaultOnly, is_text_only, "only [\"text\"] is supported"},
      {"n", Kind::Read},
      {"parallel_tool_calls", Kind::DefaultOnly, parallel_or_no_tools,
       "false is not supported: strata does not limit a reply to one tool call"},
      {"prediction", Kind::Accepted},  // predicted outputs change latency, never the text
      {"presence_penalty", Kind::Read},
      {"prompt_cache_key", Kind::Accepted},
      {"prompt_cache_retention", Kind::Accepted},
      {"reasoning_effort", Kind::Read},
      {"response_format", Kind::Read},
      {"safety_identifier", Kind::Accepted},
      {"seed", Kind::Read},
      {"service_tier", Kind::Accepted},
      {"stop", Kind::Read},
      {"store", Kind::Accepted},
      {"stream", Kind::Read},
      {"stream_options", Kind::Read},
      {"temperature", Kind::Read},
      {"tool_choice", Kind::Read},
      {"tools", Kind::Read},
      {"top_logprobs", Kind::Read},
      {"top_p", Kind::Read},
      {"user", Kind::Accepted},
      {"verbosity", Kind::DefaultOnly, is_medium, "only 'medium' (the default) is supported"},
      {"web_search_options", Kind::DefaultOnly, never, "web search is not supported"},
      // Extensions (vLLM's names) strata reads.
      {"chat_template_kwargs", Kind::Read},
      {"ignore_eos", Kind::Read},
      {"min_p", Kind::Read},
      {"repetition_penalty", Kind::Read},
      {"top_k", Kind::Read},
      // strata's own: false keeps the request out of speculative decoding.
      {"draft", Kind::Read},
  };
  return f;
}

const std::vector<Field>& completion_fields() {
  static const std::vector<Field> f = {
      {"model", Kind::Read},
      {"prompt", Kind::Read},
      {"best_of", Kind::DefaultOnly, is_one, "only 1 is supported"},
      {"echo", Kind::DefaultOnly, is_false, "echoing the prompt is not supported"},
      {"frequency_penalty", Kind::Read},
      {"logit_bias", Kind::Read},
      {"logprobs", Kind::Read},
      {"max_tokens", Kind::Read},
      {"n", Kind::Read},
      {"presence_penalty", Kind::Read},
      {"seed", Kind::Read},
      {"stop", Kind::Read},
      {"stream", Kind::Read},
      {"stream_options", Kind::Read},
      {"suffix", Kind::DefaultOnly, is_empty_string, "a suffix (insertion) is not supported"},
      {"temperature", Kind::Read},
      {"top_p", Kind::Read},
      {"user", Kind::Accepted},
      // Extensions (vLLM's names) strata reads.
      {"ignore_eos", Kind::Read},
      {"max_completion_tokens", Kind::Read},
      {"min_p", Kind::Read},
      {"repetition_penalty", Kind::Read},
      {"top_k", Kind::Read},
      // strata's own: false keeps the request out of speculative decoding.
      {"draft", Kind::Read},
  };
  return f;
}

const Field* find(const std::vector<Field>& fields, std::string_view name) {
  for (const Field& f : fields)
    if (f.name == name) return &f;
  return nullptr;
}

}  // namespace

void check_fields(const json& body, bool chat) {
  const std::vector<Field>& fields = chat ? chat_fields() : completion_fields();
  // Unknown names first, all of them in one message (the object's keys come sorted).
  std::vector<std::string> unknown;
  for (const auto& [key, value] : body.items())
    if (!find(fields, key)) unknown.push_back(key);
  if (unknown.size() == 1)
    throw ApiError{400, "Unrecognized request argument supplied: " + unknown[0], "invalid_request_error", unknown[0]};
  if (!unknown.empty()) {
    std::string list;
    for (const auto& k : unknown) list += (list.empty() ? "" : ", ") + k;
    throw ApiError{400, "Unrecognized request arguments supplied: " + list, "invalid_request_error"};
  }
  for (const auto& [key, value] : body.items()) {
    const Field& f = *find(fields, key);
    if (f.kind != Kind::DefaultOnly || value.is_null() || f.is_default(value, body)) continue;
    throw ApiError{400, "'" + key + "': " + f.unsupported, "invalid_request_error", key};
  }
}

}  // namespace strata
