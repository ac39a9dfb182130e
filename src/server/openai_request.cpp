#include "server/openai_request.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "server/openai_fields.h"
#include "util/json_depth.h"

namespace strata {

namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& param, const std::string& why) {
  throw ApiError{400, param.empty() ? why : "'" + param + "': " + why, "invalid_request_error", param};
}

double number(const json& j, const char* key, double lo, double hi) {
  const json& v = j[key];
  if (!v.is_number()) bad(key, "must be a number");
  const double d = v.get<double>();
  if (!(d >= lo && d <= hi)) bad(key, "must be between " + json(lo).dump() + " and " + json(hi).dump());
  return d;
}

// A JSON integer within [lo, hi]: one written above INT64_MAX (held as
// unsigned) is out of range, not wrapped.
bool integer_in(const json& v, int64_t lo, int64_t hi, int64_t& out) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return false;
  } else if (!v.is_number_integer()) {
    return false;
  }
  out = v.get<int64_t>();
  return out >= lo && out <= hi;
}

int64_t integer(const json& j, const char* key, int64_t lo, int64_t hi) {
  const json& v = j[key];
  if (!v.is_number_integer()) bad(key, "must be an integer");
  int64_t i = 0;
  if (!integer_in(v, lo, hi, i)) bad(key, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return i;
}

bool has(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

using ojson = nlohmann::ordered_json;

// An upper bound on the values a body holds, less one: its commas and
// opening brackets outside strings. Counting stops past `limit`.
size_t json_value_bound(std::string_view body, size_t limit) {
  size_t n = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size() && n <= limit; ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == ',' || c == '[' || c == '{') {
      ++n;
    }
  }
  return n;
}

// Chat content may be a string or an array of parts; templates want strings.
// Every message renders to at least one token, so a chat of more messages
// than `context` cannot fit.
ojson normalize_messages(const ojson& msgs, int64_t context) {
  if (!msgs.is_array() || msgs.empty()) bad("messages", "must be a non-empty array");
  if (context > 0 && static_cast<int64_t>(msgs.size()) > context)
    throw ApiError{400, "'messages': " + std::to_string(msgs.size()) + " messages cannot fit in the context of " +
                            std::to_string(context) + " tokens",
                   "invalid_request_error", "messages", "context_length_exceeded"};
  ojson out = ojson::array();
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ojson& m = msgs[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad(where, "must be an object");
    if (!m.contains("role") || !m["role"].is_string()) bad(where + ".role", "must be a string");
    ojson n = m;
    if (m.contains("content") && m["content"].is_array()) {
      std::string text;
      for (const auto& part : m["content"]) {
        const std::string type = part.is_object() && part.contains("type") && part["type"].is_string()
                                     ? part["type"].get<std::string>() : "";
        if (type == "image_url" || type == "input_image" || type == "image")
          bad(where + ".content", "image input is not supported yet: strata runs the text model only (a "
                                  "checkpoint's vision tower is not loaded)");
        if (!part.is_object() || type != "text" || !part.contains("text") || !part["text"].is_string())
          bad(where + ".content", "only text parts are supported");
        text += part["text"].get<std::string>();
      }
      n["content"] = text;
    } else if (m.contains("content") && !m["content"].is_string() && !m["content"].is_null()) {
      bad(where + ".content", "must be a string, an array of text parts, or null");
    }
    out.push_back(n);
  }
  return out;
}

// {"token id": bias} -> (id, bias) by ascending id.
std::vector<std::pair<int32_t, float>> logit_bias(const json& v, int64_t vocab) {
  if (!v.is_object()) bad("logit_bias", "must be an object mapping token ids to biases");
  std::vector<std::pair<int32_t, float>> out;
  for (const auto& [key, bias] : v.items()) {
    // One spelling per id ("7", never "07" or "+7"), so no two keys name the same token.
    const bool canonical = !key.empty() && key.size() <= 10 && (key == "0" || key[0] != '0') &&
                           std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!canonical) bad("logit_bias", "'" + key + "' is not a token id (a non-negative decimal integer)");
    const int64_t id = std::stoll(key);
    if (id >= vocab)
      bad("logit_bias", "token id " + key + " is outside the vocabulary (" + std::to_string(vocab) + " tokens)");
    if (!bias.is_number()) bad("logit_bias", "the bias of token " + key + " must be a number");
    const double b = bias.get<double>();
    if (!(b >= -100 && b <= 100)) bad("logit_bias", "the bias of token " + key + " must be between -100 and 100");
    out.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// "none" / "auto" (strata's behaviour either way, see the header); what
// would need constrained decoding is refused.
void check_tool_choice(const json& v) {
  if (v == "none" || v == "auto") return;
  if (v == "required" || v.is_object())
    bad("tool_choice", std::string(v.is_object() ? "a named tool" : "'required'") +
                           " is not supported yet: strata cannot force a tool call; only 'none' and 'auto' are");
  bad("tool_choice", "must be 'none', 'auto', 'required' or a named tool");
}

void check_response_format(const json& v) {
  const json type = v.is_object() && v.contains("type") ? v["type"] : json();
  if (!type.is_string()) bad("response_format", "must be an object with a string 'type'");
  if (type == "text") return;
  if (type == "json_object" || type == "json_schema")
    bad("response_format", "'" + type.get<std::string>() +
                               "' is not supported yet: strata cannot constrain the output to JSON; only 'text' is");
  bad("response_format", "type must be 'text', 'json_object' or 'json_schema'");
}

}  // namespace

ParsedRequest parse_request(const std::string& body, bool chat, const ServedModel& served) {
  // Before parsing: what is done with the value afterwards recurses per level.
  if (json_nesting_depth(body, kMaxBodyDepth) > kMaxBodyDepth)
    bad("", "the body nests deeper than " + std::to_string(kMaxBodyDepth) + " levels");
  // Parsed, each value costs 16 bytes and more (a body of 8 MiB of token ids
  // took 150 MB): more than a prompt of the whole context needs is refused
  // unparsed.
  const size_t max_values = static_cast<size_t>(std::max<int64_t>(served.context, 0)) + kBodyValuesBeyondContext;
  if (json_value_bound(body, max_values) > max_values)
    throw ApiError{400, "the body holds more than " + std::to_string(max_values) +
                            " JSON values (a prompt of the whole context, and " +
                            std::to_string(kBodyValuesBeyondContext) + " more)",
                   "invalid_request_error", "", "context_length_exceeded"};
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) bad("", "the body is not valid JSON");
  if (!j.is_object()) bad("", "the body must be a JSON object");
  check_fields(j, chat);
  ParsedRequest p;
  const std::string& model = served.name;
  if (has(j, "model")) {
    if (!j["model"].is_string()) bad("model", "must be a string");
    if (j["model"].get<std::string>() != model)
      throw ApiError{404, "the model '" + j["model"].get<std::string>() + "' does not exist; this server serves '" + model + "'",
                     "invalid_request_error", "model", "model_not_found"};
  }
  if (chat) {
    const ojson o = ojson::parse(body, nullptr, /*allow_exceptions=*/false);
    if (!o.contains("messages")) bad("messages", "is required");
    p.messages = normalize_messages(o["messages"], served.context);
    j.erase("messages");  // o's are the ones kept: a long chat is held once, not twice
    if (has(j, "tools")) {
      if (!j["tools"].is_array()) bad("tools", "must be an array");
      p.tools = o["tools"];
    }
    if (has(j, "chat_template_kwargs")) {
      if (!j["chat_template_kwargs"].is_object()) bad("chat_template_kwargs", "must be an object");
      p.template_kwargs = o["chat_template_kwargs"];
    }
    if (has(j, "reasoning_effort")) {
      if (!j["reasoning_effort"].is_string()) bad("reasoning_effort", "must be a string");
      if (!p.template_kwargs.is_object()) p.template_kwargs = ojson::object();
      p.template_kwargs["reasoning_effort"] = o["reasoning_effort"];
    }
    if (has(j, "response_format")) check_response_format(j["response_format"]);
    if (has(j, "tool_choice")) {
      check_tool_choice(j["tool_choice"]);
      // "auto" is the default; "none" matters only when there are tools to not call.
      if (j["tool_choice"] == "none" && p.tools.is_array() && !p.tools.empty()) {
        if (!p.template_kwargs.is_object()) p.template_kwargs = ojson::object();
        p.template_kwargs["tool_choice"] = "none";
      }
    }
  } else {
    if (!j.contains("prompt")) bad("prompt", "is required");
    const json& pr = j["prompt"];
    if (pr.is_string()) {
      p.prompt_text = std::move(j["prompt"].get_ref<std::string&>());  // taken, not copied: it may be megabytes
      if (p.prompt_text.empty()) bad("prompt", "must not be empty");
    } else if (pr.is_array() && pr.size() == 1 && pr[0].is_string()) {
      p.prompt_text = pr[0].get<std::string>();
    } else if (pr.is_array() && !pr.empty() && std::all_of(pr.begin(), pr.end(), [](const json& v) { return v.is_number_integer(); })) {
      if (served.context > 0 && static_cast<int64_t>(pr.size()) > served.context)
        throw ApiError{400, "'prompt': " + std::to_string(pr.size()) + " token ids are more than the context of " +
                                std::to_string(served.context),
                       "invalid_request_error", "prompt", "context_length_exceeded"};
      const int64_t last_id = served.vocab_size > 0 ? served.vocab_size - 1 : INT32_MAX;
      p.prompt_ids.reserve(pr.size());
      for (size_t i = 0; i < pr.size(); ++i) {
        int64_t id = 0;
        if (!integer_in(pr[i], 0, last_id, id))
          bad("prompt", "token id " + pr[i].dump() + " (at " + std::to_string(i) + ") is outside the vocabulary (0 to " +
                            std::to_string(last_id) + ")");
        p.prompt_ids.push_back(static_cast<int32_t>(id));
      }
    } else {
      bad("prompt", "must be a string, a one-element array of strings, or an array of token ids");
    }
  }
  for (const char* key : {"max_tokens", "max_completion_tokens"})
    if (has(j, key)) p.max_tokens = static_cast<int>(integer(j, key, 1, served.max_tokens_limit));
  if (has(j, "n") && integer(j, "n", 1, 128) != 1) bad("n", "only 1 is supported (one choice per request)");
  if (has(j, "temperature")) p.sampling.temperature = static_cast<float>(number(j, "temperature", 0, 2));
  else p.sampling.temperature = 1.0f;  // OpenAI's default
  if (has(j, "top_p")) p.sampling.top_p = static_cast<float>(number(j, "top_p", 1e-9, 1));
  if (has(j, "top_k")) p.sampling.top_k = static_cast<int32_t>(integer(j, "top_k", 0, 1 << 20));
  if (has(j, "min_p")) p.sampling.min_p = static_cast<float>(number(j, "min_p", 0, 1));
  if (has(j, "presence_penalty")) p.sampling.presence_penalty = static_cast<float>(number(j, "presence_penalty", -2, 2));
  if (has(j, "frequency_penalty")) p.sampling.frequency_penalty = static_cast<float>(number(j, "frequency_penalty", -2, 2));
  if (has(j, "repetition_penalty"))
    p.sampling.repetition_penalty = static_cast<float>(number(j, "repetition_penalty", 1e-3, 100));
  if (has(j, "seed")) p.sampling.seed = static_cast<uint64_t>(integer(j, "seed", INT64_MIN, INT64_MAX));
  else p.sampling.seed = std::random_device{}();
  if (has(j, "stop")) {
    const json& st = j["stop"];
    if (st.is_string()) p.stop.push_back(st.get<std::string>());
    else if (st.is_array() && st.size() <= 4 && std::all_of(st.begin(), st.end(), [](const json& v) { return v.is_string(); }))
      for (const auto& v : st) p.stop.push_back(v.get<std::string>());
    else bad("stop", "must be a string or an array of up to 4 strings");
  }
  if (has(j, "stream")) {
    if (!j["stream"].is_boolean()) bad("stream", "must be a boolean");
    p.stream = j["stream"].get<bool>();
  }
  if (has(j, "stream_options")) {
    const json& so = j["stream_options"];
    if (!so.is_object()) bad("stream_options", "must be an object");
    // include_obfuscation pads chunks against side channels; strata sends none, which changes no text.
    for (const auto& [key, v] : so.items()) {
      if (key != "include_usage" && key != "include_obfuscation")
        bad("stream_options", "unknown option '" + key + "' (include_usage and include_obfuscation are)");
      if (!v.is_null() && !v.is_boolean()) bad("stream_options", "'" + key + "' must be a boolean");
    }
    p.include_usage = so.contains("include_usage") && so["include_usage"] == true;
  }
  if (has(j, "logit_bias")) p.sampling.logit_bias = logit_bias(j["logit_bias"], served.vocab_size);
  if (chat) {
    if (has(j, "logprobs")) {
      if (!j["logprobs"].is_boolean()) bad("logprobs", "must be a boolean");
      p.logprobs = j["logprobs"].get<bool>();
    }
    if (has(j, "top_logprobs")) {
      p.top_logprobs = static_cast<int>(integer(j, "top_logprobs", 0, 20));
      if (!p.logprobs) bad("top_logprobs", "needs logprobs: true");
    }
  } else if (has(j, "logprobs")) {
    p.logprobs = true;
    p.top_logprobs = static_cast<int>(integer(j, "logprobs", 0, 5));
  }
  if (has(j, "ignore_eos")) {
    if (!j["ignore_eos"].is_boolean()) bad("ignore_eos", "must be a boolean");
    p.ignore_eos = j["ignore_eos"].get<bool>();
  }
  if (has(j, "draft")) {
    if (!j["draft"].is_boolean()) bad("draft", "must be a boolean");
    p.draft = j["draft"].get<bool>();
  }
  return p;
}

}  // namespace strata
