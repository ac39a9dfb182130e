// The Parser's postfix forms: attribute and item access, slices, call
// arguments, calls, filters (a|f) and tests (a is t).
#include "template/error.h"
#include "template/parser_internal.h"

namespace strata::tmpl::detail {

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (cur_op(".") || cur_op("[")) node = parse_subscript(std::move(node));
    else if (cur_op("(")) node = parse_call(std::move(node));
    else break;
  }
  return node;
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (cur_op("|")) node = parse_filter(std::move(node), false);
    else if (cur_name("is")) node = parse_test(std::move(node));
    else if (cur_op("(")) node = parse_call(std::move(node));
    else break;
  }
  return node;
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  DepthGuard guard(*this);
  const Token& t = next();
  const int line = t.line;
  if (t.value == ".") {
    const Token& attr = next();
    if (attr.type == TokenType::Name) {
      auto n = std::make_unique<Expr>(ExprKind::Getattr, line);
      n->a = std::move(node);
      n->name = attr.value;
      return finish(std::move(n));
    }
    if (attr.type != TokenType::Integer) fail("expected name or number", attr.line);
    auto n = std::make_unique<Expr>(ExprKind::Getitem, line);
    n->a = std::move(node);
    n->b = constant(Value::integer(attr.ival), attr.line);
    return finish(std::move(n));
  }
  std::vector<ExprPtr> args;
  while (!cur_op("]")) {
    if (!args.empty()) expect_op(",");
    args.push_back(parse_subscribed());
  }
  expect_op("]");
  auto n = std::make_unique<Expr>(ExprKind::Getitem, line);
  n->a = std::move(node);
  if (args.size() == 1) {
    n->b = std::move(args[0]);
  } else {
    n->b = std::make_unique<Expr>(ExprKind::Tuple, line);
    n->b->items = std::move(args);
    n->b = finish(std::move(n->b));
  }
  return finish(std::move(n));
}

ExprPtr Parser::parse_subscribed() {
  const int line = cur().line;
  auto slice = std::make_unique<Expr>(ExprKind::Slice, line);
  if (cur_op(":")) {
    next();
  } else {
    ExprPtr node = parse_expression(true);
    if (!cur_op(":")) return node;
    next();
    slice->a = std::move(node);
  }
  if (!cur_op(":") && !cur_op("]") && !cur_op(",")) slice->b = parse_expression(true);
  if (cur_op(":")) {
    next();
    if (!cur_op("]") && !cur_op(",")) slice->c = parse_expression(true);
  }
  return finish(std::move(slice));
}

void Parser::parse_call_args(CallSpec& spec) {
  const int line = expect_op("(").line;
  auto ensure = [&](bool ok) {
    if (!ok) fail("invalid syntax for function call expression", line);
  };
  bool require_comma = false;
  while (!cur_op(")")) {
    if (require_comma) {
      expect_op(",");
      if (cur_op(")")) break;
    }
    if (cur_op("*")) {
      ensure(!spec.dyn_args && !spec.dyn_kwargs);
      next();
      spec.dyn_args = parse_expression(true);
    } else if (cur_op("**")) {
      ensure(!spec.dyn_kwargs);
      next();
      spec.dyn_kwargs = parse_expression(true);
    } else if (cur().type == TokenType::Name && is_op(look(), "=")) {
      ensure(!spec.dyn_kwargs);
      std::string key = next().value;
      next();
      spec.kwargs.emplace_back(std::move(key), parse_expression(true));
    } else {
      ensure(!spec.dyn_args && !spec.dyn_kwargs && spec.kwargs.empty());
      spec.args.push_back(parse_expression(true));
    }
    require_comma = true;
  }
  expect_op(")");
}

ExprPtr Parser::parse_call(ExprPtr node) {
  DepthGuard guard(*this);
  auto n = std::make_unique<Expr>(ExprKind::Call, cur().line);
  n->a = std::move(node);
  parse_call_args(n->call);
  return finish(std::move(n));
}

ExprPtr Parser::parse_filter(ExprPtr node, bool start_inline) {
  while (cur_op("|") || start_inline) {
    DepthGuard guard(*this);
    if (!start_inline) next();
    const Token& t = expect(TokenType::Name);
    auto n = std::make_unique<Expr>(ExprKind::Filter, t.line);
    n->name = t.value;
    while (skip_op(".")) n->name += "." + expect(TokenType::Name).value;
    if (cur_op("(")) parse_call_args(n->call);
    n->a = std::move(node);
    node = finish(std::move(n));
    start_inline = false;
  }
  return node;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  DepthGuard guard(*this);
  const int line = next().line;
  const bool negated = skip_name("not");
  auto n = std::make_unique<Expr>(ExprKind::Test, line);
  n->name = expect(TokenType::Name).value;
  while (skip_op(".")) n->name += "." + expect(TokenType::Name).value;
  const Token& t = cur();
  if (is_op(t, "(")) {
    parse_call_args(n->call);
  } else if ((t.type == TokenType::Name || t.type == TokenType::String || t.type == TokenType::Integer ||
              t.type == TokenType::Float || is_op(t, "(") || is_op(t, "[") || is_op(t, "{")) &&
             !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and")) {
    if (is_name(t, "is")) fail("You cannot chain multiple tests with is");
    n->call.args.push_back(parse_postfix(parse_primary()));
  }
  n->a = std::move(node);
  n = finish(std::move(n));
  if (!negated) return n;
  auto neg = std::make_unique<Expr>(ExprKind::Not, line);
  neg->a = std::move(n);
  return finish(std::move(neg));
}

}  // namespace strata::tmpl::detail
