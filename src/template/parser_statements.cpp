// The Parser's statements: the template body and every tag (for, if, set,
// with, block, print, macro, call, filter, generation, break / continue),
// macro signatures and assignment targets.
#include "template/error.h"
#include "template/parser_internal.h"

namespace strata::tmpl::detail {

Body Parser::subparse(const EndTokens& end_tokens) {
  Body body;
  while (cur().type != TokenType::Eof) {
    const Token& t = cur();
    if (t.type == TokenType::Data) {
      auto s = std::make_unique<Stmt>(StmtKind::Text, t.line);
      s->text = t.value;
      body.push_back(std::move(s));
      next();
    } else if (t.type == TokenType::VarBegin) {
      const int line = next().line;
      auto s = std::make_unique<Stmt>(StmtKind::Print, line);
      s->expr = parse_tuple(false, true, {}, false);
      expect(TokenType::VarEnd);
      body.push_back(std::move(s));
    } else if (t.type == TokenType::BlockBegin) {
      next();
      if (!end_tokens.empty() && matches(cur(), end_tokens)) return body;
      body.push_back(parse_statement(end_tokens));
      expect(TokenType::BlockEnd);
    } else {
      fail("unexpected '" + show(t) + "'");
    }
  }
  return body;
}

Body Parser::parse_statements(const EndTokens& end_tokens, bool drop_needle) {
  skip_op(":");
  expect(TokenType::BlockEnd);
  Body body = subparse(end_tokens);
  if (cur().type == TokenType::Eof) {
    std::string want;
    for (std::string_view e : end_tokens) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
    fail("Unexpected end of template. Jinja was looking for the following tags: " + want + ".");
  }
  if (drop_needle) next();
  return body;
}

StmtPtr Parser::parse_statement(const EndTokens& outer_end) {
  DepthGuard guard(*this);
  const Token& t = cur();
  if (t.type != TokenType::Name) fail("tag name expected");
  const std::string& tag = t.value;
  if (tag == "for") return parse_for();
  if (tag == "if") return parse_if();
  if (tag == "set") return parse_set();
  if (tag == "macro") return parse_macro();
  if (tag == "call") return parse_call_block();
  if (tag == "filter") return parse_filter_block();
  if (tag == "with") return parse_with();
  if (tag == "block") return parse_block();
  if (tag == "print") return parse_print();
  if (tag == "generation") {
    auto s = std::make_unique<Stmt>(StmtKind::Scope, next().line);
    const int saved = loop_depth_;
    loop_depth_ = 0;  // the body is a caller function in jinja2
    s->body = parse_statements({"endgeneration"}, true);
    loop_depth_ = saved;
    return s;
  }
  if (tag == "break" || tag == "continue") {
    const Token& tok = next();
    if (loop_depth_ == 0) fail("'" + tok.value + "' outside loop", tok.line);
    return std::make_unique<Stmt>(tok.value == "break" ? StmtKind::Break : StmtKind::Continue, tok.line);
  }
  if (tag == "extends" || tag == "include" || tag == "import" || tag == "from" || tag == "autoescape")
    fail("the '" + tag + "' tag is not supported in chat templates");
  std::string msg = "Encountered unknown tag '" + tag + "'.";
  if (!outer_end.empty()) {
    std::string want;
    for (std::string_view e : outer_end) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
    msg += " Jinja was looking for the following tags: " + want + ".";
  }
  fail(msg, t.line);
}

StmtPtr Parser::parse_for() {
  auto s = std::make_unique<Stmt>(StmtKind::For, expect_name("for").line);
  s->target = parse_assign_target(true, false, {"in"}, false);
  expect_name("in");
  s->expr = parse_tuple(false, false, {"recursive"}, false);
  if (skip_name("if")) s->test = parse_expression(true);
  s->recursive = skip_name("recursive");
  ++loop_depth_;
  s->body = parse_statements({"endfor", "else"}, false);
  --loop_depth_;
  if (next().value != "endfor") s->else_body = parse_statements({"endfor"}, true);
  return s;
}

StmtPtr Parser::parse_if() {
  auto s = std::make_unique<Stmt>(StmtKind::If, expect_name("if").line);
  while (true) {
    ExprPtr test = parse_tuple(false, false, {}, false);
    Body body = parse_statements({"elif", "else", "endif"}, false);
    s->branches.emplace_back(std::move(test), std::move(body));
    const Token& t = next();
    if (t.value == "elif") continue;
    if (t.value == "else") s->else_body = parse_statements({"endif"}, true);
    break;
  }
  return s;
}

StmtPtr Parser::parse_set() {
  const int line = next().line;
  Target target = parse_assign_target(true, false, {}, true);
  if (skip_op("=")) {
    auto s = std::make_unique<Stmt>(StmtKind::Set, line);
    s->target = std::move(target);
    s->expr = parse_tuple(false, true, {}, false);
    return s;
  }
  auto s = std::make_unique<Stmt>(StmtKind::SetBlock, line);
  s->target = std::move(target);
  s->expr = parse_filter(nullptr, false);
  s->body = parse_statements({"endset"}, true);
  return s;
}

StmtPtr Parser::parse_with() {
  auto s = std::make_unique<Stmt>(StmtKind::With, next().line);
  while (cur().type != TokenType::BlockEnd) {
    if (!s->targets.empty()) expect_op(",");
    s->targets.push_back(parse_assign_target(true, false, {}, false));
    expect_op("=");
    s->values.push_back(parse_expression(true));
  }
  s->body = parse_statements({"endwith"}, true);
  return s;
}

StmtPtr Parser::parse_block() {
  auto s = std::make_unique<Stmt>(StmtKind::Scope, next().line);
  const std::string name = expect(TokenType::Name).value;
  skip_name("scoped");
  skip_name("required");
  if (cur_op("-"))
    fail("Block names in Jinja have to be valid Python identifiers and may not contain hyphens, use an underscore instead.");
  s->text = "block";
  const int saved = loop_depth_;
  loop_depth_ = 0;
  s->body = parse_statements({"endblock"}, true);
  loop_depth_ = saved;
  skip_name(name);
  return s;
}

StmtPtr Parser::parse_print() {
  auto s = std::make_unique<Stmt>(StmtKind::Print, next().line);
  auto tuple = std::make_unique<Expr>(ExprKind::Concat, s->line);
  while (cur().type != TokenType::BlockEnd) {
    if (!tuple->items.empty()) expect_op(",");
    tuple->items.push_back(parse_expression(true));
  }
  s->expr = finish(std::move(tuple));
  return s;
}

void Parser::parse_signature(MacroDef& def) {
  expect_op("(");
  while (!cur_op(")")) {
    if (!def.params.empty()) expect_op(",");
    def.params.push_back(expect(TokenType::Name).value);
    if (skip_op("=")) {
      def.defaults.push_back(parse_expression(true));
    } else if (!def.defaults.empty()) {
      fail("non-default argument follows default argument");
    }
  }
  expect_op(")");
}

StmtPtr Parser::parse_macro() {
  auto s = std::make_unique<Stmt>(StmtKind::Macro, next().line);
  s->macro.name = expect(TokenType::Name).value;
  macro_stack_.push_back(&s->macro);
  parse_signature(s->macro);
  macro_stack_.pop_back();
  s->body = parse_macro_body(s->macro, "endmacro");
  return s;
}

// A macro's (or call block's) body: inside the macro, outside any loop the
// definition sits in (break/continue cannot reach through it).
Body Parser::parse_macro_body(MacroDef& m, std::string_view end) {
  macro_stack_.push_back(&m);
  const int saved = loop_depth_;
  loop_depth_ = 0;
  auto body = parse_statements({end}, true);
  loop_depth_ = saved;
  macro_stack_.pop_back();
  return body;
}

StmtPtr Parser::parse_call_block() {
  auto s = std::make_unique<Stmt>(StmtKind::CallBlock, next().line);
  s->macro.name = "caller";
  macro_stack_.push_back(&s->macro);
  if (cur_op("(")) parse_signature(s->macro);
  macro_stack_.pop_back();
  s->expr = parse_expression(true);
  if (s->expr->kind != ExprKind::Call) fail("expected call", s->line);
  s->body = parse_macro_body(s->macro, "endcall");
  return s;
}

StmtPtr Parser::parse_filter_block() {
  auto s = std::make_unique<Stmt>(StmtKind::FilterBlock, next().line);
  s->expr = parse_filter(nullptr, true);
  s->body = parse_statements({"endfilter"}, true);
  return s;
}

Target Parser::to_target(const Expr& e) {
  Target t;
  t.line = e.line;
  if (e.kind == ExprKind::Name) {
    t.kind = Target::Kind::Name;
    t.name = e.name;
    return t;
  }
  if (e.kind == ExprKind::Tuple) {
    t.kind = Target::Kind::Tuple;
    for (const auto& item : e.items) t.items.push_back(to_target(*item));
    return t;
  }
  static const char* const kNames[] = {"const", "name", "list", "tuple", "dict", "getattr", "getitem",
                                       "slice", "call", "filter", "test", "not", "neg", "pos",
                                       "binary", "and", "or", "concat", "compare", "condexpr"};
  fail(std::string("can't assign to '") + kNames[static_cast<int>(e.kind)] + "'", e.line);
}

Target Parser::parse_assign_target(bool with_tuple, bool name_only, const EndTokens& extra_end, bool with_namespace) {
  if (with_namespace && is_op(look(), ".")) {
    Target t;
    t.kind = Target::Kind::NsRef;
    t.line = cur().line;
    t.name = expect(TokenType::Name).value;
    next();
    t.attr = expect(TokenType::Name).value;
    return t;
  }
  if (name_only) {
    Target t;
    t.line = cur().line;
    t.name = expect(TokenType::Name).value;
    return t;
  }
  ExprPtr e = with_tuple ? parse_tuple(true, true, extra_end, false) : parse_primary();
  return to_target(*e);
}

}  // namespace strata::tmpl::detail
