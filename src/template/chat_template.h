#pragma once
// Chat templates: the Jinja2 program a checkpoint ships to turn a
// conversation into prompt text (tokenizer_config.json "chat_template", GGUF
// "tokenizer.chat_template"), rendered byte-for-byte as transformers'
// apply_chat_template renders it: jinja2's ImmutableSandboxedEnvironment with
// trim_blocks, lstrip_blocks and loop controls, transformers' tojson
// (json.dumps with ensure_ascii=False), raise_exception and strftime_now, and
// jinja2's default Undefined.
//
//   ChatTemplate t(config["chat_template"].get<std::string>());
//   std::string prompt = t.render(nlohmann::ordered_json{
//       {"messages", messages}, {"tools", tools}, {"add_generation_prompt", true},
//       {"bos_token", "<s>"}, {"eos_token", "</s>"}, {"enable_thinking", false}});
//
// Errors are ChatTemplateError (a strata::Error): kind() Syntax from the
// constructor, Render or Raised (the template's raise_exception(message);
// message() is that text, meant for the API client) from render().
#include <ctime>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "template/error.h"
#include "template/limits.h"

namespace strata {

namespace tmpl {
struct Program;
}

using ChatTemplateError = tmpl::TemplateError;

class ChatTemplate {
 public:
  // Local wall-clock time for strftime_now (transformers: datetime.now()).
  using Clock = std::function<std::tm()>;

  // Compiles the template; throws ChatTemplateError (Syntax, with the line)
  // for bad syntax or an unknown filter / test outside an {% if %}.
  explicit ChatTemplate(std::string source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Renders with the variables of `context`, a JSON object whose keys become
  // template variables: messages, tools (transformers passes null when there
  // are none), add_generation_prompt, bos_token, eos_token, and any template
  // kwargs (enable_thinking, thinking, reasoning_effort, ...). A key that is
  // absent is undefined in the template, which is not the same as null.
  // Pass ordered_json to keep the key order of the request (tojson prints
  // dicts in their order, as Python does); nlohmann::json has sorted keys.
  // Safe to call from several threads at once.
  std::string render(const nlohmann::ordered_json& context) const;
  std::string render(const nlohmann::json& context) const;

  // Replaces the clock strftime_now reads (tests pin it).
  void set_clock(Clock clock);

  // Bounds on one render (loop iterations + macro calls, macro recursion,
  // size of built strings and of the output); exceeding one is a Render error.
  using Limits = tmpl::RenderLimits;
  void set_limits(const Limits& limits) { limits_ = limits; }

  const std::string& source() const { return source_; }

 private:
  template <class Json>
  std::string render_json(const Json& context) const;

  std::string source_;
  std::shared_ptr<const tmpl::Program> program_;
  Clock clock_;
  Limits limits_;
};

}  // namespace strata
