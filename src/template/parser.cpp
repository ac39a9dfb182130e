// Template text -> Program: parse(), and the Parser's token-stream helpers
// (expectations, error messages) and node bookkeeping. Statements, expressions,
// postfix forms and the filter / test checks live in parser_*.cpp.
#include "template/parser.h"

#include <algorithm>

#include "template/error.h"
#include "template/parser_internal.h"

namespace strata::tmpl::detail {

std::string Parser::show(const Token& t) {
  switch (t.type) {
    case TokenType::Name:
    case TokenType::Operator:
    case TokenType::Integer:
    case TokenType::Float: return t.value;
    case TokenType::String: return "string";
    default: return describe(t.type);
  }
}

[[noreturn]] void Parser::fail(const std::string& msg, int line) { syntax_error(msg, line ? line : cur().line); }

const Token& Parser::expect(TokenType type) {
  if (cur().type != type) {
    if (cur().type == TokenType::Eof) fail(std::string("unexpected end of template, expected '") + describe(type) + "'.");
    fail(std::string("expected token '") + describe(type) + "', got '" + show(cur()) + "'");
  }
  return next();
}
const Token& Parser::expect_op(std::string_view v) {
  if (!cur_op(v)) {
    if (cur().type == TokenType::Eof) fail("unexpected end of template, expected '" + std::string(v) + "'.");
    fail("expected token '" + std::string(v) + "', got '" + show(cur()) + "'");
  }
  return next();
}
const Token& Parser::expect_name(std::string_view v) {
  if (!cur_name(v)) {
    if (cur().type == TokenType::Eof) fail("unexpected end of template, expected '" + std::string(v) + "'.");
    fail("expected token '" + std::string(v) + "', got '" + show(cur()) + "'");
  }
  return next();
}

bool Parser::matches(const Token& t, const EndTokens& rules) const {
  for (std::string_view r : rules)
    if (is_name(t, r)) return true;
  return false;
}

// Every node records its depth; chains built in loops (a + b + c ...,
// x|f|g ..., a.b.c ...) are not bounded by the recursion guard, and the
// evaluator (and the destructor) recurse on them.
ExprPtr Parser::finish(ExprPtr n) {
  int d = 0;
  auto upd = [&](const ExprPtr& c) {
    if (c) d = std::max(d, c->depth);
  };
  upd(n->a);
  upd(n->b);
  upd(n->c);
  for (const auto& item : n->items) upd(item);
  for (const auto& arg : n->call.args) upd(arg);
  for (const auto& kv : n->call.kwargs) upd(kv.second);
  upd(n->call.dyn_args);
  upd(n->call.dyn_kwargs);
  n->depth = d + 1;
  if (n->depth > kMaxExprDepth)
    fail("expression nested more than " + std::to_string(kMaxExprDepth) + " levels deep", n->line);
  return n;
}

}  // namespace strata::tmpl::detail

namespace strata::tmpl {

std::unique_ptr<Program> parse(std::string_view source) {
  auto program = detail::Parser(tokenize(source)).run();
  detail::resolve(program->body, false);
  return program;
}

}  // namespace strata::tmpl
