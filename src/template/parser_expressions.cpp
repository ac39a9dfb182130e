// The Parser's expressions, by precedence: inline if, or, and, not,
// comparisons, arithmetic, ~, unary, then primaries, tuples, lists and dicts.
#include "template/error.h"
#include "template/parser_internal.h"

namespace strata::tmpl::detail {

ExprPtr Parser::parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

ExprPtr Parser::parse_condexpr() {
  DepthGuard guard(*this);
  int line = cur().line;
  ExprPtr expr1 = parse_or();
  while (skip_name("if")) {
    ExprPtr expr2 = parse_or();
    ExprPtr expr3;
    if (skip_name("else")) expr3 = parse_condexpr();
    auto node = std::make_unique<Expr>(ExprKind::CondExpr, line);
    node->a = std::move(expr2);
    node->b = std::move(expr1);
    node->c = std::move(expr3);
    expr1 = finish(std::move(node));
    line = cur().line;
  }
  return expr1;
}

ExprPtr Parser::binary(ExprKind kind, ExprPtr l, ExprPtr r, int line) {
  auto node = std::make_unique<Expr>(kind, line);
  node->a = std::move(l);
  node->b = std::move(r);
  return finish(std::move(node));
}

ExprPtr Parser::parse_or() {
  const int line = cur().line;
  ExprPtr left = parse_and();
  while (skip_name("or")) left = binary(ExprKind::Or, std::move(left), parse_and(), line);
  return left;
}

ExprPtr Parser::parse_and() {
  const int line = cur().line;
  ExprPtr left = parse_not();
  while (skip_name("and")) left = binary(ExprKind::And, std::move(left), parse_not(), line);
  return left;
}

ExprPtr Parser::parse_not() {
  if (cur_name("not")) {
    DepthGuard guard(*this);
    const int line = next().line;
    auto node = std::make_unique<Expr>(ExprKind::Not, line);
    node->a = parse_not();
    return finish(std::move(node));
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const int line = cur().line;
  ExprPtr expr = parse_math1();
  std::unique_ptr<Expr> node;
  while (true) {
    CmpOp op;
    const Token& t = cur();
    if (t.type == TokenType::Operator && t.value == "==") op = CmpOp::Eq;
    else if (t.type == TokenType::Operator && t.value == "!=") op = CmpOp::Ne;
    else if (t.type == TokenType::Operator && t.value == "<") op = CmpOp::Lt;
    else if (t.type == TokenType::Operator && t.value == "<=") op = CmpOp::Le;
    else if (t.type == TokenType::Operator && t.value == ">") op = CmpOp::Gt;
    else if (t.type == TokenType::Operator && t.value == ">=") op = CmpOp::Ge;
    else if (is_name(t, "in")) op = CmpOp::In;
    else if (is_name(t, "not") && is_name(look(), "in")) {
      next();
      op = CmpOp::NotIn;
    } else break;
    next();
    if (!node) {
      node = std::make_unique<Expr>(ExprKind::Compare, line);
      node->items.push_back(std::move(expr));
    }
    node->ops.push_back(op);
    node->items.push_back(parse_math1());
  }
  return node ? finish(std::move(node)) : std::move(expr);
}

ExprPtr Parser::arith(BinOp op, ExprPtr l, ExprPtr r, int line) {
  auto node = binary(ExprKind::Binary, std::move(l), std::move(r), line);
  node->op = op;
  return node;  // finished by binary()
}

ExprPtr Parser::parse_math1() {
  int line = cur().line;
  ExprPtr left = parse_concat();
  while (cur_op("+") || cur_op("-")) {
    const BinOp op = next().value == "+" ? BinOp::Add : BinOp::Sub;
    left = arith(op, std::move(left), parse_concat(), line);
    line = cur().line;
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  const int line = cur().line;
  ExprPtr first = parse_math2();
  if (!cur_op("~")) return first;
  auto node = std::make_unique<Expr>(ExprKind::Concat, line);
  node->items.push_back(std::move(first));
  while (skip_op("~")) node->items.push_back(parse_math2());
  return finish(std::move(node));
}

ExprPtr Parser::parse_math2() {
  int line = cur().line;
  ExprPtr left = parse_pow();
  while (cur_op("*") || cur_op("/") || cur_op("//") || cur_op("%")) {
    const std::string& v = next().value;
    const BinOp op = v == "*" ? BinOp::Mul : v == "/" ? BinOp::Div : v == "//" ? BinOp::FloorDiv : BinOp::Mod;
    left = arith(op, std::move(left), parse_pow(), line);
    line = cur().line;
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  int line = cur().line;
  ExprPtr left = parse_unary(true);
  while (skip_op("**")) {
    left = arith(BinOp::Pow, std::move(left), parse_unary(true), line);
    line = cur().line;
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  DepthGuard guard(*this);
  const int line = cur().line;
  ExprPtr node;
  if (cur_op("-") || cur_op("+")) {
    const bool neg = next().value == "-";
    node = std::make_unique<Expr>(neg ? ExprKind::Neg : ExprKind::Pos, line);
    node->a = parse_unary(false);
    node = finish(std::move(node));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::constant(Value v, int line) {
  auto node = std::make_unique<Expr>(ExprKind::Const, line);
  node->value = std::move(v);
  return node;
}

ExprPtr Parser::parse_primary() {
  DepthGuard guard(*this);
  const Token& t = cur();
  const int line = t.line;
  switch (t.type) {
    case TokenType::Name: {
      const std::string v = next().value;
      if (v == "true" || v == "True") return constant(Value::boolean(true), line);
      if (v == "false" || v == "False") return constant(Value::boolean(false), line);
      if (v == "none" || v == "None") return constant(Value::none(), line);
      if (v == "caller" || v == "varargs" || v == "kwargs")
        for (MacroDef* m : macro_stack_) {
          if (v == "caller") m->catch_caller = true;
          if (v == "varargs") m->catch_varargs = true;
          if (v == "kwargs") m->catch_kwargs = true;
        }
      auto node = std::make_unique<Expr>(ExprKind::Name, line);
      node->name = v;
      return node;
    }
    case TokenType::String: {
      std::string s = next().value;
      while (cur().type == TokenType::String) s += next().value;
      return constant(Value::string(std::move(s)), line);
    }
    case TokenType::Integer: return constant(Value::integer(next().ival), line);
    case TokenType::Float: return constant(Value::number(next().fval), line);
    case TokenType::Operator:
      if (t.value == "(") {
        next();
        ExprPtr node = parse_tuple(false, true, {}, true);
        expect_op(")");
        return node;
      }
      if (t.value == "[") return parse_literal_items(ExprKind::List, "[", "]");
      if (t.value == "{") return parse_literal_items(ExprKind::Dict, "{", "}");
      break;
    default: break;
  }
  if (t.type == TokenType::Eof) fail("unexpected end of template");
  fail("unexpected '" + show(t) + "'");
}

bool Parser::is_tuple_end(const EndTokens& extra) const {
  const Token& t = cur();
  if (t.type == TokenType::VarEnd || t.type == TokenType::BlockEnd || is_op(t, ")")) return true;
  return matches(t, extra);
}

ExprPtr Parser::parse_tuple(bool simplified, bool with_condexpr, const EndTokens& extra_end, bool explicit_parentheses) {
  DepthGuard guard(*this);
  const int line = cur().line;
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) expect_op(",");
    if (is_tuple_end(extra_end)) break;
    if (simplified) args.push_back(parse_primary());
    else args.push_back(parse_expression(with_condexpr));
    if (cur_op(",")) is_tuple = true;
    else break;
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parentheses) {
      if (cur().type == TokenType::Eof) fail("unexpected end of template");
      fail("Expected an expression, got '" + show(cur()) + "'");
    }
  }
  auto node = std::make_unique<Expr>(ExprKind::Tuple, line);
  node->items = std::move(args);
  return finish(std::move(node));
}

// `[a, b,]` or `{k: v, ...,}`: comma-separated entries up to the closing
// bracket, a trailing comma allowed; a dict entry is a key and its value.
ExprPtr Parser::parse_literal_items(ExprKind kind, std::string_view open, std::string_view close) {
  auto node = std::make_unique<Expr>(kind, expect_op(open).line);
  while (!cur_op(close)) {
    if (!node->items.empty()) expect_op(",");
    if (cur_op(close)) break;
    node->items.push_back(parse_expression(true));
    if (kind == ExprKind::Dict) {
      expect_op(":");
      node->items.push_back(parse_expression(true));
    }
  }
  expect_op(close);
  return finish(std::move(node));
}

}  // namespace strata::tmpl::detail
