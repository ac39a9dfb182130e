#pragma once
// Prompt preparation, one place for every client (the CLI, the server, later
// the drafter): the checkpoint's tokenizer and chat template, text or chat
// messages -> token ids, and the ids that end generation.
//
// BOS: plain text goes through the tokenizer's own post-processing
// (encode_prompt: BOS when tokenizer_config.json / the post_processor adds
// one); a chat template writes bos_token itself, so its output is encoded
// without anything added, as transformers' apply_chat_template(tokenize=True).
//
// Stop ids (one policy for `generate` and `serve`): every id the checkpoint
// names as an end of sequence, in this order without repeats:
// generation_config.json's eos_token_id (what transformers' generate() stops
// at), config.json's (or the GGUF's) eos ids, and the tokenizer's eos token
// (what a chat template closes a turn with). A checkpoint whose files
// disagree (Kimi-K2: config.json's [EOS], the chat turn's <|im_end|>) stops
// at either, so neither a completion nor a chat turn runs on past its end.
//
// Kimi K3 ships no Jinja template (its encoding is a Python script): for a
// kimi_k3 model whose tokenizer has none, chats go through the native
// encoder of runtime/k3_chat.h instead, segment by segment, so that control
// tokens written in content stay text.
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace strata {

class ChatTemplate;
class Model;
class Tokenizer;

// The ids that end generation for `model` with tokenizer `tok` (may be
// null; see the policy above).
std::vector<int32_t> stop_token_ids(const Model& model, const Tokenizer* tok);

struct ChatPrompt {
  std::string text;          // the template's output
  std::vector<int32_t> ids;  // its tokens
  bool too_long = false;     // with max_tokens: they would pass it (ids left empty)
};

class PromptBuilder {
 public:
  // Reads the tokenizer and chat template of `model_path` (as
  // Tokenizer::for_model takes it). A model without a tokenizer takes token
  // ids only; a template that does not compile is kept as template_error().
  PromptBuilder(const Model& model, const std::filesystem::path& model_path);
  // The same with the tokenizer already read (Tokenizer::for_model; null for
  // none): the CLI and the server read it before the model, so that the RAM
  // budget's measured baseline includes it.
  PromptBuilder(const Model& model, std::unique_ptr<Tokenizer> tokenizer);
  ~PromptBuilder();

  const Tokenizer* tokenizer() const { return tok_.get(); }
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  bool has_chat_template() const { return template_ != nullptr || k3_chat_; }
  const std::string& template_source() const { return template_source_; }
  // Chats are rendered by Kimi K3's native encoding (runtime/k3_chat.h).
  bool native_k3_chat() const { return k3_chat_; }
  const std::string& template_error() const { return template_error_; }

  // Plain text -> ids with the tokenizer's BOS/EOS. Needs tokenizer().
  // With `max_tokens`, nullopt as soon as the ids would pass it, the rest of
  // the text not encoded (Tokenizer::encode_prompt(text, max_tokens)).
  std::vector<int32_t> encode(const std::string& text) const;
  std::optional<std::vector<int32_t>> encode(const std::string& text, std::size_t max_tokens) const;
  // A conversation through the chat template with add_generation_prompt,
  // bos_token and eos_token as transformers passes them; `extra` (template
  // kwargs such as enable_thinking) is the starting context, `tools` null
  // when there are none; with `extra` tool_choice "none" the template gets no
  // tools (it has no other way to keep the model from calling them). Needs
  // has_chat_template(); throws ChatTemplateError when the template rejects
  // the messages. Safe from several threads.
  // With the K3 encoder, `extra` gives thinking (or enable_thinking; default
  // true), thinking_effort (default "max", as the checkpoint's
  // apply_chat_template; null for none), tool_choice and response_format;
  // its rejections are ChatTemplateError Raised.
  // Ids past `max_tokens` are not encoded: the prompt comes back too_long.
  ChatPrompt render_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                         const nlohmann::ordered_json& extra,
                         std::size_t max_tokens = std::numeric_limits<std::size_t>::max()) const;

 private:
  ChatPrompt render_k3_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                            const nlohmann::ordered_json& extra, std::size_t max_tokens) const;

  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<ChatTemplate> template_;
  std::string template_source_, template_error_;
  bool k3_chat_ = false;  // render chats with k3_chat_segments (no Jinja template)
  std::vector<int32_t> stop_ids_;
};

}  // namespace strata
