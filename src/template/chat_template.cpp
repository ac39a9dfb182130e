#include "template/chat_template.h"

#include "template/ast.h"
#include "template/interpreter.h"
#include "template/json.h"
#include "template/parser.h"

namespace strata {

namespace {
std::tm local_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  return tm;
}
}  // namespace

ChatTemplate::ChatTemplate(std::string source)
    : source_(std::move(source)), program_(tmpl::parse(source_)), clock_(local_now) {}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

void ChatTemplate::set_clock(Clock clock) { clock_ = clock ? std::move(clock) : Clock(local_now); }

template <class Json>
std::string ChatTemplate::render_json(const Json& context) const {
  if (!context.is_object())
    throw ChatTemplateError(ChatTemplateError::Kind::Render, "the render context must be a JSON object");
  try {
    const tmpl::Value vars = tmpl::from_json(context);
    tmpl::Interpreter interpreter(*program_, vars.dict(), clock_, limits_);
    return interpreter.render();
  } catch (const ChatTemplateError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    // std::length_error and friends from a runaway template: still one error.
    throw ChatTemplateError(ChatTemplateError::Kind::Render, e.what());
  }
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const { return render_json(context); }
std::string ChatTemplate::render(const nlohmann::json& context) const { return render_json(context); }

}  // namespace strata
