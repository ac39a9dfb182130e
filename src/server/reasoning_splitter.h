#pragma once
// Generated text split into reasoning and answer (`reasoning_content` /
// `content`) for chat templates that mark thinking:
//   think:   "<think> ... </think> answer" (DeepSeek-R1/V3.1, Qwen3, Kimi-K2-Thinking);
//            a prompt that ends inside an open <think> starts in reasoning;
//   harmony: gpt-oss channels, "<|channel|>analysis<|message|>...<|end|>" is
//            reasoning, "<|channel|>final<|message|>..." the answer; other
//            control tokens are dropped.
#include <string>

namespace strata {

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
