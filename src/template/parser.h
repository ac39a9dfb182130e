#pragma once
// Template text -> Program, as jinja2's Parser and the compile-time checks
// of its code generator do it: the grammar of jinja2/parser.py with the tags
// transformers enables (loopcontrols' break/continue, and {% generation %}),
// unknown filters and tests rejected unless they sit inside an {% if %} or an
// inline if (jinja2 defers those to render time), break/continue only inside
// a loop, nesting depth bounded.
#include <memory>
#include <string_view>

#include "template/ast.h"

namespace strata::tmpl {

// Throws TemplateError (Kind::Syntax) with the line of the problem.
std::unique_ptr<Program> parse(std::string_view source);

}  // namespace strata::tmpl
