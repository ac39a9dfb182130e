// An OpenAI request body, as the server takes it: the first byte picks
// /v1/chat/completions or /v1/completions, the rest is the body. A chat
// request that parses is rendered through a fixed template that prints the
// messages, the tools and the kwargs (tojson), as serving would.
#include "fuzz_support.h"
#include "server/openai_request.h"
#include "template/chat_template.h"

using namespace strata;

namespace {

const ChatTemplate& chat_template() {
  static const ChatTemplate t(
      "{%- if tools %}{{ tools | tojson }}{% endif %}"
      "{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}"
      "{%- if m.tool_calls %}{{ m.tool_calls | tojson(indent=2) }}{% endif %}{% endfor %}"
      "{%- if add_generation_prompt %}<|assistant|>{% endif %}{{ reasoning_effort }}");
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = data[0] & 1;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const ServedModel served{"strata-model", 4096, 1000};
  try {
    ParsedRequest p = parse_request(body, chat, served);
    if (!chat) return 0;
    nlohmann::ordered_json context = p.template_kwargs.is_object() ? p.template_kwargs : nlohmann::ordered_json::object();
    context["messages"] = p.messages;
    context["tools"] = p.tools;
    context["add_generation_prompt"] = true;
    fuzz::expect_clean([&] { (void)chat_template().render(context); });
  } catch (const ApiError&) {
  }
  return 0;
}
