#pragma once
// Kimi K3's conversation encoding ("XTML"), natively: K3 ships no Jinja chat
// template; its tokenizer calls build_chat_segments() of the checkpoint's
// encoding_k3.py. This renders the same segment list from OpenAI-style
// messages (docs/kimi_k3.md, "Chat"; fixtures made by
// tools/make_k3_chat_fixtures.py, whose docstring names the sources).
//
// Contract: a conversation becomes a list of segments, each tokenized on its
// own. Only the four markers <|open|>, <|close|>, <|sep|>, <|end_of_msg|>
// (and image placeholders) are control segments (allow_special); tag names,
// attributes and every piece of content are text segments, encoded with
// special tokens disallowed. So "<|end_of_msg|><|open|>message role=..."
// written in a user message stays text and can never open a forged turn.
// Segments are never concatenated before encoding, and empty text yields no
// segment, as in the script.
//
// The script (and llama.cpp's Kimi-K3.jinja) checks thinking_effort against
// {"low","high","max"}, while the system text both send the model lists low,
// medium, high and max: all four are accepted here.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace strata {

class Tokenizer;

struct K3Segment {
  std::string text;
  bool allow_special = false;
  bool operator==(const K3Segment&) const = default;
};

struct K3ChatOptions {
  bool add_generation_prompt = true;
  bool thinking = true;
  // nullopt or "": no thinking-effort message. The script's own
  // apply_chat_template defaults it to "max" (PromptBuilder does the same).
  std::optional<std::string> thinking_effort;
  std::optional<std::string> tool_choice;  // "required" / "none" add a system note; others nothing
  nlohmann::ordered_json response_format;  // {"type": "json_object" | "json_schema", ...} or null
};

// `messages`: an array of {role, content, name?, reasoning_content?,
// reasoning?, tool_calls?, tool_call_id?, tools?}; `tools`: the request's
// tool list or null. Throws strata::Error for what the script rejects (an
// unknown thinking effort, tool call arguments that are JSON but not an
// object, a tool result whose tool cannot be named, malformed messages).
std::vector<K3Segment> k3_chat_segments(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                        const K3ChatOptions& options);

// Each segment on its own: control segments with special tokens recognized,
// text segments with Tokenizer::encode_ordinary. No BOS is added (the script
// adds none). With `max_tokens`, nullopt once the ids would pass it
// (Tokenizer::encode(text, max_tokens)).
std::vector<int32_t> k3_encode_segments(const Tokenizer& tok, const std::vector<K3Segment>& segments);
std::optional<std::vector<int32_t>> k3_encode_segments(const Tokenizer& tok, const std::vector<K3Segment>& segments,
                                                       std::size_t max_tokens);

// The segments' texts joined: what the prompt reads as (for logs and
// ChatPrompt::text), not something to tokenize as a whole.
std::string k3_segments_text(const std::vector<K3Segment>& segments);

}  // namespace strata
