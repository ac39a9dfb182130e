#pragma once
// Generated text split into reasoning and answer (`reasoning_content` /
// `content`) for chat templates that mark thinking:
//   think:   "<think> ... </think> answer" (DeepSeek-R1/V3.1, Qwen3, Kimi-K2-Thinking);
//            a prompt that ends inside an open <think> starts in reasoning;
//   harmony: gpt-oss channels, "<|channel|>analysis<|message|>...<|end|>" is
//            reasoning, "<|channel|>final<|message|>..." the answer; other
//            control tokens are dropped;
//   xtml:    Kimi K3's markup, "<|open|>think<|sep|> ... <|close|>think<|sep|>"
//            is reasoning, what any other block or no block holds the
//            answer; the markup itself and <|end_of_msg|> are dropped.
#include <string>

namespace strata {

struct SplitText {
  std::string reasoning, content;
};

class ReasoningSplitter {
 public:
  enum class Mode { None, Think, Harmony, Xtml };
  // The mode a chat template implies (Kimi K3's native encoding: Xtml).
  static Mode mode_for(const std::string& template_source);
  // Whether the rendered prompt leaves a thinking block open (<think>, or
  // K3's <|open|>think<|sep|>): the output then starts in reasoning.
  static bool starts_in_reasoning(Mode mode, const std::string& rendered);
  ReasoningSplitter(Mode mode, bool starts_in_reasoning);
  SplitText add(const std::string& text);
  SplitText flush();

 private:
  SplitText drain(bool final);
  // One step of Xtml: false when the buffer holds only an incomplete marker.
  bool drain_xtml(SplitText& out, bool final);
  Mode mode_;
  bool reasoning_;
  std::string buf_;
};

}  // namespace strata
