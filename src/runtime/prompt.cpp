#include "runtime/prompt.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "model/model.h"
#include "runtime/k3_chat.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/json_file.h"

namespace strata {

std::vector<int32_t> stop_token_ids(const Model& model, const Tokenizer* tok) {
  std::vector<int32_t> ids;
  auto add = [&](int32_t id) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  const auto gen_path = model.trunk_path() / "generation_config.json";
  if (std::ifstream f(gen_path); f) {
    std::ostringstream text;
    text << f.rdbuf();
    const nlohmann::json g = parse_json_or_discarded(text.str());
    // An id is never narrowed: one past the logits row is refused, not wrapped.
    auto add_checked = [&](const nlohmann::json& v) {
      const std::optional<int64_t> id = json_int64(v);
      if (!id || *id < 0 || *id >= model.config().vocab_size)
        throw Error(gen_path.string() + ": eos_token_id " + v.dump() + " is outside the vocabulary (" +
                    std::to_string(model.config().vocab_size) + " ids)");
      add(static_cast<int32_t>(*id));
    };
    if (g.is_object() && g.contains("eos_token_id")) {
      const auto& e = g["eos_token_id"];
      if (e.is_number_integer()) add_checked(e);
      if (e.is_array())
        for (const auto& v : e)
          if (v.is_number_integer()) add_checked(v);
    }
  }
  for (int32_t id : model.config().eos_token_ids) add(id);
  if (tok)
    for (int32_t id : tok->eos_ids()) add(id);
  return ids;
}

PromptBuilder::PromptBuilder(const Model& model, const std::filesystem::path& model_path)
    : PromptBuilder(model, Tokenizer::for_model(model_path)) {}

PromptBuilder::PromptBuilder(const Model& model, std::unique_ptr<Tokenizer> tokenizer)
    : tok_(std::move(tokenizer)), stop_ids_(stop_token_ids(model, tok_.get())) {
  if (!tok_) return;
  if (model.config().arch == Arch::KimiK3) {
    // Always the native encoding, whatever template a checkpoint carries: a
    // template renders one string, encoded with special tokens recognized,
    // so text in a message could open a turn. Its markers must be control
    // tokens of this tokenizer, or the prompt would be plain text.
    for (const char* marker : {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"}) {
      const std::vector<int32_t> ids = tok_->encode(marker);
      if (ids.size() != 1 || ids == tok_->encode_ordinary(marker)) {
        template_error_ = std::string("this tokenizer has no control token ") + marker + " (Kimi K3's chat needs it)";
        return;
      }
    }
    k3_chat_ = true;
    return;
  }
  if (!tok_->chat_template()) return;
  template_source_ = *tok_->chat_template();
  try {
    template_ = std::make_unique<ChatTemplate>(template_source_);
  } catch (const ChatTemplateError& e) {
    template_error_ = e.what();  // plain text still works; chat says why it cannot
  }
}

PromptBuilder::~PromptBuilder() = default;

std::vector<int32_t> PromptBuilder::encode(const std::string& text) const {
  if (!tok_) throw Error("this model has no tokenizer");
  return tok_->encode_prompt(text);
}

std::optional<std::vector<int32_t>> PromptBuilder::encode(const std::string& text, std::size_t max_tokens) const {
  if (!tok_) throw Error("this model has no tokenizer");
  return tok_->encode_prompt(text, max_tokens);
}

ChatPrompt PromptBuilder::render_k3_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                         const nlohmann::ordered_json& extra, std::size_t max_tokens) const {
  const nlohmann::ordered_json x = extra.is_object() ? extra : nlohmann::ordered_json::object();
  K3ChatOptions o;
  auto refuse = [](const std::string& what) {
    throw ChatTemplateError(ChatTemplateError::Kind::Raised, "Kimi K3 chat: " + what);
  };
  for (const char* key : {"thinking", "enable_thinking"})
    if (x.contains(key) && !x[key].is_boolean()) refuse(std::string(key) + " must be true or false");
  if (x.contains("thinking")) o.thinking = x["thinking"].get<bool>();
  else if (x.contains("enable_thinking")) o.thinking = x["enable_thinking"].get<bool>();
  o.thinking_effort = "max";
  // The OpenAI request's reasoning_effort, where thinking_effort is not given.
  const char* effort_key = x.contains("thinking_effort") ? "thinking_effort" : "reasoning_effort";
  if (x.contains(effort_key)) {
    const auto& e = x[effort_key];
    if (e.is_null()) o.thinking_effort.reset();
    else if (!e.is_string() || (o.thinking && e.get<std::string>().empty()))
      refuse(std::string(effort_key) + " must be one of low, medium, high, max");
    else o.thinking_effort = e.get<std::string>();
  }
  if (x.contains("tool_choice") && x["tool_choice"].is_string()) o.tool_choice = x["tool_choice"].get<std::string>();
  if (x.contains("response_format")) o.response_format = x["response_format"];
  std::vector<K3Segment> segments;
  try {
    segments = k3_chat_segments(messages, tools, o);
  } catch (const Error& e) {
    // What the script would raise is the client's mistake, as a template's raise_exception.
    throw ChatTemplateError(ChatTemplateError::Kind::Raised, e.what());
  }
  ChatPrompt p;
  p.text = k3_segments_text(segments);
  auto ids = k3_encode_segments(*tok_, segments, max_tokens);
  p.too_long = !ids;
  if (ids) p.ids = std::move(*ids);
  return p;
}

ChatPrompt PromptBuilder::render_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                      const nlohmann::ordered_json& extra, std::size_t max_tokens) const {
  if (k3_chat_) return render_k3_chat(messages, tools, extra, max_tokens);
  if (!template_) throw Error(template_error_.empty() ? "this model has no chat template" : template_error_);
  nlohmann::ordered_json ctx = extra.is_object() ? extra : nlohmann::ordered_json::object();
  ctx["messages"] = messages;
  // null when absent, as transformers passes tools=None. With tool_choice
  // "none" a template (which cannot be told not to call them) is not shown
  // them: the model cannot call what it was never offered.
  const bool no_tools = ctx.contains("tool_choice") && ctx["tool_choice"] == "none";
  ctx["tools"] = no_tools ? nlohmann::ordered_json() : tools;
  ctx["add_generation_prompt"] = true;
  if (auto b = tok_->bos_id()) ctx["bos_token"] = tok_->token_text(*b);
  if (!tok_->eos_ids().empty()) ctx["eos_token"] = tok_->token_text(tok_->eos_ids().front());
  ChatPrompt p;
  p.text = template_->render(ctx);
  auto ids = tok_->encode(p.text, max_tokens);
  p.too_long = !ids;
  if (ids) p.ids = std::move(*ids);
  return p;
}

}  // namespace strata
