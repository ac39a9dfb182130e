#pragma once
// The one exception the template engine throws: a syntax error found while
// compiling, an error while rendering (jinja2 would raise UndefinedError,
// TypeError, SecurityError, ...), or the template's own raise_exception(msg).
// It is a strata::Error, so the CLI and server print it as one line.
#include <string>

#include "util/error.h"

namespace strata::tmpl {

class TemplateError : public strata::Error {
 public:
  enum class Kind { Syntax, Render, Raised };

  TemplateError(Kind kind, std::string message, int line = 0);

  Kind kind() const { return kind_; }
  int line() const { return line_; }  // 1-based; 0 when not known
  // The bare message: for Kind::Raised exactly what the template passed to
  // raise_exception (meant for the API client, e.g. "Conversation roles must
  // alternate user/assistant/...").
  const std::string& message() const { return message_; }

  TemplateError with_line(int line) const { return TemplateError(kind_, message_, line); }

 private:
  Kind kind_;
  std::string message_;
  int line_;
};

// Shorthands for the interpreter and the builtins.
[[noreturn]] void render_error(std::string message);
[[noreturn]] void syntax_error(std::string message, int line);

}  // namespace strata::tmpl
