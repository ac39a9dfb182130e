// OpenAI request validation (server/openai_request.h, server/openai_fields.h):
// every field OpenAI's reference lists for an endpoint is either read,
// accepted because it changes nothing, or refused by name when it would
// change the output and strata does not implement it; unknown fields are a
// 400 in OpenAI's words; logit_bias is checked key by key; a body nested past
// the limit is refused before parsing. The field names are the official
// openai-node 5.12 client's ChatCompletionCreateParams / CompletionCreateParams
// (tests/server_e2e/node_modules/openai) plus the reference's newer ones.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/openai_request.h"
#include "util/json_depth.h"

namespace strata {
namespace {

using json = nlohmann::json;

const ServedModel kServed{"tiny", 1000, /*vocab_size=*/500, /*context=*/64};

json chat_body(json extra = json::object()) {
  json b = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  b.update(extra);
  return b;
}

json completion_body(json extra = json::object()) {
  json b = {{"model", "tiny"}, {"prompt", "hi"}};
  b.update(extra);
  return b;
}

ParsedRequest parse(const json& body, bool chat) { return parse_request(body.dump(), chat, kServed); }

// The ApiError a body gets (status 0 when it parses).
ApiError error_of(const std::string& body, bool chat) {
  try {
    parse_request(body, chat, kServed);
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError{0, "parsed"};
}
ApiError error_of(const json& body, bool chat) { return error_of(body.dump(), chat); }

void expect_400_naming(const json& body, bool chat, const std::string& param, const std::string& in_message = "") {
  SCOPED_TRACE(body.dump());
  const ApiError e = error_of(body, chat);
  EXPECT_EQ(e.status, 400) << e.message;
  EXPECT_EQ(e.type, "invalid_request_error");
  EXPECT_EQ(e.param, param) << e.message;
  EXPECT_NE(e.message.find(param), std::string::npos) << e.message;
  if (!in_message.empty()) {
    EXPECT_NE(e.message.find(in_message), std::string::npos) << e.message;
  }
}

TEST(OpenAIRequest, UnknownFieldsAreA400InOpenAIsWords) {
  ApiError e = error_of(chat_body({{"frobnicate", 1}}), true);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.type, "invalid_request_error");
  EXPECT_EQ(e.message, "Unrecognized request argument supplied: frobnicate");
  EXPECT_EQ(e.param, "frobnicate");
  // Null is no excuse for a name OpenAI does not know.
  EXPECT_EQ(error_of(completion_body({{"thinking", nullptr}}), false).message,
            "Unrecognized request argument supplied: thinking");
  e = error_of(chat_body({{"b_field", 1}, {"a_field", 2}}), true);
  EXPECT_EQ(e.message, "Unrecognized request arguments supplied: a_field, b_field");
  // Each endpoint has its own list: chat's fields are unknown to completions and back.
  expect_400_naming(completion_body({{"tools", json::array()}}), false, "tools", "Unrecognized");
  expect_400_naming(completion_body({{"response_format", {{"type", "text"}}}}), false, "response_format",
                    "Unrecognized");
  expect_400_naming(chat_body({{"echo", false}}), true, "echo", "Unrecognized");
  expect_400_naming(chat_body({{"prompt", "x"}}), true, "prompt", "Unrecognized");
}

TEST(OpenAIRequest, FieldsThatChangeNothingAreAccepted) {
  const json chat_ignored = {{"user", "u1"},
                             {"metadata", {{"k", "v"}}},
                             {"store", true},
                             {"safety_identifier", "s"},
                             {"prompt_cache_key", "c"},
                             {"prompt_cache_retention", "24h"},
                             {"service_tier", "auto"},
                             {"prediction", {{"type", "content"}, {"content", "x"}}}};
  EXPECT_EQ(error_of(chat_body(chat_ignored), true).status, 0) << error_of(chat_body(chat_ignored), true).message;
  EXPECT_EQ(error_of(completion_body({{"user", "u1"}}), false).status, 0);
  // Fields that would change the output, given their defaults (or null).
  const json chat_defaults = {{"audio", nullptr},     {"modalities", {"text"}}, {"verbosity", "medium"},
                              {"functions", json::array()}, {"function_call", "auto"},
                              {"web_search_options", nullptr}, {"parallel_tool_calls", true},
                              {"n", 1},               {"response_format", {{"type", "text"}}},
                              {"tool_choice", "auto"}};
  EXPECT_EQ(error_of(chat_body(chat_defaults), true).status, 0) << error_of(chat_body(chat_defaults), true).message;
  const json completion_defaults = {{"best_of", 1}, {"echo", false}, {"suffix", ""}, {"n", 1}};
  EXPECT_EQ(error_of(completion_body(completion_defaults), false).status, 0);
  // Every field strata reads, together.
  const json read = {{"max_tokens", 5},          {"max_completion_tokens", 5},
                     {"temperature", 0.5},       {"top_p", 0.9},
                     {"presence_penalty", 0.1},  {"frequency_penalty", 0.1},
                     {"seed", 7},                {"stop", "x"},
                     {"stream", true},           {"stream_options", {{"include_usage", true}, {"include_obfuscation", false}}},
                     {"logprobs", true},         {"top_logprobs", 2},
                     {"logit_bias", {{"3", 1}}}, {"tools", json::array()},
                     {"reasoning_effort", "low"}, {"chat_template_kwargs", {{"enable_thinking", false}}},
                     {"top_k", 5},               {"min_p", 0.1},
                     {"repetition_penalty", 1.1}, {"ignore_eos", true}};
  const ParsedRequest p = parse(chat_body(read), true);
  EXPECT_EQ(p.max_tokens, 5);
  EXPECT_TRUE(p.stream && p.include_usage && p.logprobs && p.ignore_eos);
  EXPECT_EQ(p.top_logprobs, 2);
  EXPECT_EQ(p.sampling.top_k, 5);
}

TEST(OpenAIRequest, FieldsThatWouldChangeTheOutputAreRefusedByName) {
  expect_400_naming(chat_body({{"audio", {{"voice", "alloy"}, {"format", "mp3"}}}}), true, "audio");
  expect_400_naming(chat_body({{"modalities", {"text", "audio"}}}), true, "modalities");
  expect_400_naming(chat_body({{"verbosity", "low"}}), true, "verbosity");
  expect_400_naming(chat_body({{"web_search_options", json::object()}}), true, "web_search_options");
  expect_400_naming(chat_body({{"functions", {{{"name", "f"}}}}}), true, "functions");
  expect_400_naming(chat_body({{"function_call", {{"name", "f"}}}}), true, "function_call");
  const json tools = {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", json::object()}}}}};
  expect_400_naming(chat_body({{"tools", tools}, {"parallel_tool_calls", false}}), true, "parallel_tool_calls");
  EXPECT_EQ(error_of(chat_body({{"parallel_tool_calls", false}}), true).status, 0);  // no tools: means nothing
  expect_400_naming(chat_body({{"n", 2}}), true, "n");
  expect_400_naming(completion_body({{"n", 3}}), false, "n");
  expect_400_naming(completion_body({{"best_of", 2}}), false, "best_of");
  expect_400_naming(completion_body({{"echo", true}}), false, "echo");
  expect_400_naming(completion_body({{"suffix", "end"}}), false, "suffix");
}

TEST(OpenAIRequest, ResponseFormatOtherThanTextIsA400NamingIt) {
  expect_400_naming(chat_body({{"response_format", {{"type", "json_object"}}}}), true, "response_format",
                    "json_object");
  const json schema = {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", json::object()}}}};
  expect_400_naming(chat_body({{"response_format", schema}}), true, "response_format", "json_schema");
  expect_400_naming(chat_body({{"response_format", {{"type", "yaml"}}}}), true, "response_format");
  expect_400_naming(chat_body({{"response_format", "json_object"}}), true, "response_format");
  EXPECT_EQ(error_of(chat_body({{"response_format", nullptr}}), true).status, 0);
}

TEST(OpenAIRequest, ToolChoiceNoneOrAutoIsAcceptedAndNoneReachesTheTemplate) {
  const json tools = {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", json::object()}}}}};
  expect_400_naming(chat_body({{"tools", tools}, {"tool_choice", "required"}}), true, "tool_choice", "required");
  const json named = {{"type", "function"}, {"function", {{"name", "f"}}}};
  expect_400_naming(chat_body({{"tools", tools}, {"tool_choice", named}}), true, "tool_choice");
  expect_400_naming(chat_body({{"tool_choice", "sometimes"}}), true, "tool_choice");

  ParsedRequest p = parse(chat_body({{"tools", tools}, {"tool_choice", "none"}}), true);
  ASSERT_TRUE(p.template_kwargs.is_object());
  EXPECT_EQ(p.template_kwargs["tool_choice"], "none");
  EXPECT_EQ(p.tools.size(), 1u);  // the encoder decides what to show (runtime/prompt.h)
  // auto is the default; none without tools asks for nothing: the prompt stays as it was.
  EXPECT_TRUE(parse(chat_body({{"tools", tools}, {"tool_choice", "auto"}}), true).template_kwargs.is_null());
  EXPECT_TRUE(parse(chat_body({{"tool_choice", "none"}}), true).template_kwargs.is_null());
}

TEST(OpenAIRequest, LogitBiasIsCheckedKeyByKeyAndSortedById) {
  const ParsedRequest p = parse(completion_body({{"logit_bias", {{"10", 5}, {"2", -100}, {"0", 0.5}, {"499", 100}}}}), false);
  const std::vector<std::pair<int32_t, float>> want = {{0, 0.5f}, {2, -100.0f}, {10, 5.0f}, {499, 100.0f}};
  EXPECT_EQ(p.sampling.logit_bias, want);
  EXPECT_TRUE(parse(chat_body({{"logit_bias", nullptr}}), true).sampling.logit_bias.empty());
  for (const char* key : {"abc", "-1", "07", "+7", "1.5", "", " 7", "7 ", "99999999999", "500"}) {
    const ApiError e = error_of(chat_body({{"logit_bias", {{key, 1}}}}), true);
    EXPECT_EQ(e.status, 400) << key;
    EXPECT_EQ(e.param, "logit_bias") << key;
  }
  EXPECT_NE(error_of(chat_body({{"logit_bias", {{"500", 1}}}}), true).message.find("outside the vocabulary"),
            std::string::npos);
  for (const json& bias : {json("5"), json(true), json(100.5), json(-101), json(nullptr), json::array({1})}) {
    const ApiError e = error_of(completion_body({{"logit_bias", {{"3", bias}}}}), false);
    EXPECT_EQ(e.status, 400) << bias.dump();
    EXPECT_EQ(e.param, "logit_bias") << bias.dump();
  }
  expect_400_naming(chat_body({{"logit_bias", json::array({3, 1})}}), true, "logit_bias");
}

TEST(OpenAIRequest, StreamOptionsOfTheWrongTypeAreA400NotACrash) {
  expect_400_naming(chat_body({{"stream_options", {{"include_usage", "yes"}}}}), true, "stream_options");
  expect_400_naming(chat_body({{"stream_options", {{"extra", true}}}}), true, "stream_options");
  EXPECT_FALSE(parse(chat_body({{"stream_options", {{"include_usage", false}}}}), true).include_usage);
}

// A message nested 1,000,000 deep took `serve` down (the parse is iterative,
// copying the messages is not).
TEST(OpenAIRequest, ABodyNestedPastTheLimitIsRefusedBeforeParsing) {
  const size_t deep = 1000000;
  const std::string arrays = std::string(deep, '[') + std::string(deep, ']');
  ApiError e = error_of(arrays, true);
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find("nests deeper than 128"), std::string::npos) << e.message;
  // Inside a message, and unbalanced (a truncated body) alike.
  e = error_of(R"({"messages": [{"role": "user", "content": "x", "extra": )" + arrays + "}]}", true);
  EXPECT_NE(e.message.find("nests deeper"), std::string::npos) << e.message;
  e = error_of(R"({"messages": [{"role": "user", "content": "x", "tools": )" + std::string(deep, '{'), true);
  EXPECT_NE(e.message.find("nests deeper"), std::string::npos) << e.message;
  // Brackets inside strings are text, however many.
  json body = chat_body();
  body["messages"][0]["content"] = std::string(deep, '[') + "\\\"{";
  EXPECT_EQ(error_of(body, true).status, 0);
  // At the limit itself a body still parses (here: chat_template_kwargs nesting to depth 128).
  json nested = json::object();
  for (int i = 0; i < 126; ++i) nested = json{{"a", nested}};
  EXPECT_EQ(json_nesting_depth(chat_body({{"chat_template_kwargs", nested}}).dump()), 128u);
  EXPECT_EQ(error_of(chat_body({{"chat_template_kwargs", nested}}), true).status, 0);
  nested = json{{"a", nested}};
  EXPECT_EQ(error_of(chat_body({{"chat_template_kwargs", nested}}), true).status, 400);
}

// Integers are checked as written: one past int64 (held unsigned by the
// parser) is out of range, never wrapped (seed 2^64-1 was taken as -1).
TEST(OpenAIRequest, IntegersOutOfRangeAreA400NamingTheFieldNeverWrapped) {
  const std::string max64 = "18446744073709551615";
  const std::vector<std::pair<std::string, std::string>> completion = {
      {"\"seed\": " + max64, "seed"},
      {"\"seed\": 9223372036854775808", "seed"},
      {"\"max_tokens\": " + max64, "max_tokens"},
      {"\"max_tokens\": 4294967297", "max_tokens"},
      {"\"max_completion_tokens\": " + max64, "max_completion_tokens"},
      {"\"n\": " + max64, "n"},
      {"\"top_k\": " + max64, "top_k"},
      {"\"logprobs\": " + max64, "logprobs"},
      {"\"logit_bias\": {\"" + max64 + "\": 1}", "logit_bias"},
      {"\"prompt\": [" + max64 + "]", "prompt"},
      {"\"prompt\": [4294967296]", "prompt"},
      {"\"prompt\": [500]", "prompt"},  // the vocabulary's size: one past its last id
      {"\"prompt\": [-1]", "prompt"},
  };
  for (const auto& [field, param] : completion) {
    const std::string body = field.rfind("\"prompt\"", 0) == 0 ? "{" + field + "}" : "{\"prompt\": \"hi\", " + field + "}";
    const ApiError e = error_of(body, false);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, param) << body;
  }
  const ApiError e = error_of("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"logprobs\": true, "
                              "\"top_logprobs\": " + max64 + "}", true);
  EXPECT_EQ(e.param, "top_logprobs");
  EXPECT_EQ(parse_request(R"({"prompt": "hi", "seed": 9223372036854775807})", false, kServed).sampling.seed,
            uint64_t{9223372036854775807});
  EXPECT_EQ(parse_request(R"({"prompt": [0, 499]})", false, kServed).prompt_ids, (std::vector<int32_t>{0, 499}));
}

// More token ids, or more messages, than the context holds are refused as
// they are read, before anything is made of them.
TEST(OpenAIRequest, PromptsThatCannotFitTheContextAreRefusedWhenRead) {
  json ids = json::array();
  for (int i = 0; i < 65; ++i) ids.push_back(1);
  EXPECT_EQ(error_of(completion_body({{"prompt", ids}}), false).code, "context_length_exceeded");
  ids.erase(ids.begin());
  EXPECT_EQ(parse(completion_body({{"prompt", ids}}), false).prompt_ids.size(), 64u);
  json msgs = json::array();
  for (int i = 0; i < 65; ++i) msgs.push_back({{"role", "user"}, {"content", "x"}});
  const ApiError e = error_of(chat_body({{"messages", msgs}}), true);
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_EQ(e.param, "messages");
}

}  // namespace
}  // namespace strata
