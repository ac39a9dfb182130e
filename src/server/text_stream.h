#pragma once
// Generated tokens -> text that is safe to send now: never half a UTF-8
// character, never the first part of what may become a stop string. Then,
// for templates that mark thinking, the text is split into reasoning and
// answer (`reasoning_content` / `content`):
//   think:   "<think> ... </think> answer" (DeepSeek-R1/V3.1, Qwen3, Kimi-K2-Thinking);
//            a prompt that ends inside an open <think> starts in reasoning;
//   harmony: gpt-oss channels, "<|channel|>analysis<|message|>...<|end|>" is
//            reasoning, "<|channel|>final<|message|>..." the answer; other
//            control tokens are dropped.
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

class Tokenizer;

class TextStream {
 public:
  TextStream(const Tokenizer& tok, std::vector<std::string> stops);
  // Adds a token and returns the text that became safe to send.
  std::string add(int32_t token);
  // The held-back rest, at the end of generation (cut at a stop string).
  std::string flush();
  // A stop string appeared: the text before it was returned, generation should end.
  bool stopped() const { return stopped_; }

 private:
  std::string take(bool final);
  const Tokenizer& tok_;
  std::vector<std::string> stops_;
  std::vector<int32_t> ids_;
  size_t sent_ = 0;  // bytes of the decoded text already returned
  bool stopped_ = false;
};

struct SplitText {
  std::string reasoning, content;
};

class ReasoningSplitter {
 public:
  enum class Mode { None, Think, Harmony };
  // The mode a chat template implies, and whether the rendered prompt leaves
  // a <think> block open.
  static Mode mode_for(const std::string& template_source);
  ReasoningSplitter(Mode mode, bool starts_in_reasoning);
  SplitText add(const std::string& text);
  SplitText flush();

 private:
  SplitText drain(bool final);
  Mode mode_;
  bool reasoning_;
  std::string buf_;
};

}  // namespace strata
