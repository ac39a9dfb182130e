#include "template/error.h"

namespace strata::tmpl {

namespace {
std::string format(TemplateError::Kind kind, const std::string& message, int line) {
  std::string out = kind == TemplateError::Kind::Syntax ? "chat template syntax error" : "chat template";
  if (line > 0) out += ", line " + std::to_string(line);
  out += ": ";
  out += message;
  return out;
}
}  // namespace

TemplateError::TemplateError(Kind kind, std::string message, int line)
    : strata::Error(format(kind, message, line)), kind_(kind), message_(std::move(message)), line_(line) {}

void render_error(std::string message) { throw TemplateError(TemplateError::Kind::Render, std::move(message)); }

void syntax_error(std::string message, int line) {
  throw TemplateError(TemplateError::Kind::Syntax, std::move(message), line);
}

}  // namespace strata::tmpl
