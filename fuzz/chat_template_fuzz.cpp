// A chat template's source, compiled and rendered against a small fixed
// conversation (system, user, an assistant tool call, a tool result), with
// render limits tightened so that what a template may legitimately spend
// does not read as a hang: crashes, stack overflows and unbounded memory are
// what is looked for. ChatTemplateError (a strata::Error) is the expected
// answer to a bad template.
#include "fuzz_support.h"
#include "template/chat_template.h"

using namespace strata;

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json c = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Hi <b>there</b>, what's 2+2?"},
      {"role": "assistant", "content": "", "reasoning_content": "add",
       "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "4"},
      {"role": "assistant", "content": "4 \u00e9\u4f60"}
    ],
    "tools": [{"type": "function", "function": {"name": "add", "description": "Adds",
               "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "number"}},
                              "required": ["a", "b"]}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "enable_thinking": false, "thinking": true, "reasoning_effort": "low"
  })");
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_clean([&] {
    ChatTemplate t{std::string(fuzz::as_text(data, size))};
    tmpl::RenderLimits limits;
    limits.max_steps = 200'000;
    limits.max_string = 1 << 20;
    limits.max_output = 1 << 20;
    t.set_limits(limits);
    t.set_clock([] { return std::tm{}; });
    (void)t.render(context());
  });
  return 0;
}
