#include "template/parser.h"

#include <algorithm>
#include <initializer_list>

#include "template/builtins.h"
#include "template/error.h"
#include "template/lexer.h"

namespace strata::tmpl {

namespace {

constexpr int kMaxNesting = 256;
constexpr int kMaxExprDepth = 400;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  std::unique_ptr<Program> run() {
    auto program = std::make_unique<Program>();
    program->body = subparse({});
    return program;
  }

 private:
  using EndTokens = std::vector<std::string_view>;

  // ------------------------------------------------------------ token stream

  const Token& cur() const { return toks_[i_]; }
  const Token& look() const { return toks_[std::min(i_ + 1, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[i_];
    if (i_ + 1 < toks_.size()) ++i_;
    return t;
  }

  static bool is_name(const Token& t, std::string_view v) { return t.type == TokenType::Name && t.value == v; }
  static bool is_op(const Token& t, std::string_view v) { return t.type == TokenType::Operator && t.value == v; }
  bool cur_name(std::string_view v) const { return is_name(cur(), v); }
  bool cur_op(std::string_view v) const { return is_op(cur(), v); }

  bool skip_name(std::string_view v) {
    if (!cur_name(v)) return false;
    next();
    return true;
  }
  bool skip_op(std::string_view v) {
    if (!cur_op(v)) return false;
    next();
    return true;
  }

  static std::string show(const Token& t) {
    switch (t.type) {
      case TokenType::Name:
      case TokenType::Operator:
      case TokenType::Integer:
      case TokenType::Float: return t.value;
      case TokenType::String: return "string";
      default: return describe(t.type);
    }
  }

  [[noreturn]] void fail(const std::string& msg, int line = 0) { syntax_error(msg, line ? line : cur().line); }

  const Token& expect(TokenType type) {
    if (cur().type != type) {
      if (cur().type == TokenType::Eof) fail(std::string("unexpected end of template, expected '") + describe(type) + "'.");
      fail(std::string("expected token '") + describe(type) + "', got '" + show(cur()) + "'");
    }
    return next();
  }
  const Token& expect_op(std::string_view v) {
    if (!cur_op(v)) {
      if (cur().type == TokenType::Eof) fail("unexpected end of template, expected '" + std::string(v) + "'.");
      fail("expected token '" + std::string(v) + "', got '" + show(cur()) + "'");
    }
    return next();
  }
  const Token& expect_name(std::string_view v) {
    if (!cur_name(v)) {
      if (cur().type == TokenType::Eof) fail("unexpected end of template, expected '" + std::string(v) + "'.");
      fail("expected token '" + std::string(v) + "', got '" + show(cur()) + "'");
    }
    return next();
  }

  bool matches(const Token& t, const EndTokens& rules) const {
    for (std::string_view r : rules)
      if (is_name(t, r)) return true;
    return false;
  }

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxNesting) p.fail("template nested more than " + std::to_string(kMaxNesting) + " levels deep");
    }
    ~DepthGuard() { --p.depth_; }
  };

  // Every node records its depth; chains built in loops (a + b + c ...,
  // x|f|g ..., a.b.c ...) are not bounded by the recursion guard, and the
  // evaluator (and the destructor) recurse on them.
  ExprPtr finish(ExprPtr n) {
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

  // ------------------------------------------------------------ statements

  Body subparse(const EndTokens& end_tokens) {
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

  Body parse_statements(const EndTokens& end_tokens, bool drop_needle) {
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

  StmtPtr parse_statement(const EndTokens& outer_end) {
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

  StmtPtr parse_for() {
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

  StmtPtr parse_if() {
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

  StmtPtr parse_set() {
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

  StmtPtr parse_with() {
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

  StmtPtr parse_block() {
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

  StmtPtr parse_print() {
    auto s = std::make_unique<Stmt>(StmtKind::Print, next().line);
    auto tuple = std::make_unique<Expr>(ExprKind::Concat, s->line);
    while (cur().type != TokenType::BlockEnd) {
      if (!tuple->items.empty()) expect_op(",");
      tuple->items.push_back(parse_expression(true));
    }
    s->expr = finish(std::move(tuple));
    return s;
  }

  void parse_signature(MacroDef& def) {
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

  StmtPtr parse_macro() {
    auto s = std::make_unique<Stmt>(StmtKind::Macro, next().line);
    s->macro.name = expect(TokenType::Name).value;
    macro_stack_.push_back(&s->macro);
    parse_signature(s->macro);
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_statements({"endmacro"}, true);
    loop_depth_ = saved;
    macro_stack_.pop_back();
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = std::make_unique<Stmt>(StmtKind::CallBlock, next().line);
    s->macro.name = "caller";
    macro_stack_.push_back(&s->macro);
    if (cur_op("(")) parse_signature(s->macro);
    macro_stack_.pop_back();
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::Call) fail("expected call", s->line);
    macro_stack_.push_back(&s->macro);
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_statements({"endcall"}, true);
    loop_depth_ = saved;
    macro_stack_.pop_back();
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = std::make_unique<Stmt>(StmtKind::FilterBlock, next().line);
    s->expr = parse_filter(nullptr, true);
    s->body = parse_statements({"endfilter"}, true);
    return s;
  }

  Target to_target(const Expr& e) {
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

  Target parse_assign_target(bool with_tuple, bool name_only, const EndTokens& extra_end, bool with_namespace) {
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

  // ------------------------------------------------------------ expressions

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
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

  ExprPtr binary(ExprKind kind, ExprPtr l, ExprPtr r, int line) {
    auto node = std::make_unique<Expr>(kind, line);
    node->a = std::move(l);
    node->b = std::move(r);
    return finish(std::move(node));
  }

  ExprPtr parse_or() {
    const int line = cur().line;
    ExprPtr left = parse_and();
    while (skip_name("or")) left = binary(ExprKind::Or, std::move(left), parse_and(), line);
    return left;
  }

  ExprPtr parse_and() {
    const int line = cur().line;
    ExprPtr left = parse_not();
    while (skip_name("and")) left = binary(ExprKind::And, std::move(left), parse_not(), line);
    return left;
  }

  ExprPtr parse_not() {
    if (cur_name("not")) {
      DepthGuard guard(*this);
      const int line = next().line;
      auto node = std::make_unique<Expr>(ExprKind::Not, line);
      node->a = parse_not();
      return finish(std::move(node));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
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

  ExprPtr arith(BinOp op, ExprPtr l, ExprPtr r, int line) {
    auto node = binary(ExprKind::Binary, std::move(l), std::move(r), line);
    node->op = op;
    return node;  // finished by binary()
  }

  ExprPtr parse_math1() {
    int line = cur().line;
    ExprPtr left = parse_concat();
    while (cur_op("+") || cur_op("-")) {
      const BinOp op = next().value == "+" ? BinOp::Add : BinOp::Sub;
      left = arith(op, std::move(left), parse_concat(), line);
      line = cur().line;
    }
    return left;
  }

  ExprPtr parse_concat() {
    const int line = cur().line;
    ExprPtr first = parse_math2();
    if (!cur_op("~")) return first;
    auto node = std::make_unique<Expr>(ExprKind::Concat, line);
    node->items.push_back(std::move(first));
    while (skip_op("~")) node->items.push_back(parse_math2());
    return finish(std::move(node));
  }

  ExprPtr parse_math2() {
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

  ExprPtr parse_pow() {
    int line = cur().line;
    ExprPtr left = parse_unary(true);
    while (skip_op("**")) {
      left = arith(BinOp::Pow, std::move(left), parse_unary(true), line);
      line = cur().line;
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
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

  ExprPtr constant(Value v, int line) {
    auto node = std::make_unique<Expr>(ExprKind::Const, line);
    node->value = std::move(v);
    return node;
  }

  ExprPtr parse_primary() {
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
        if (t.value == "[") return parse_list();
        if (t.value == "{") return parse_dict();
        break;
      default: break;
    }
    if (t.type == TokenType::Eof) fail("unexpected end of template");
    fail("unexpected '" + show(t) + "'");
  }

  bool is_tuple_end(const EndTokens& extra) const {
    const Token& t = cur();
    if (t.type == TokenType::VarEnd || t.type == TokenType::BlockEnd || is_op(t, ")")) return true;
    return matches(t, extra);
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const EndTokens& extra_end, bool explicit_parentheses) {
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

  ExprPtr parse_list() {
    auto node = std::make_unique<Expr>(ExprKind::List, expect_op("[").line);
    while (!cur_op("]")) {
      if (!node->items.empty()) expect_op(",");
      if (cur_op("]")) break;
      node->items.push_back(parse_expression(true));
    }
    expect_op("]");
    return finish(std::move(node));
  }

  ExprPtr parse_dict() {
    auto node = std::make_unique<Expr>(ExprKind::Dict, expect_op("{").line);
    while (!cur_op("}")) {
      if (!node->items.empty()) expect_op(",");
      if (cur_op("}")) break;
      node->items.push_back(parse_expression(true));
      expect_op(":");
      node->items.push_back(parse_expression(true));
    }
    expect_op("}");
    return finish(std::move(node));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (cur_op(".") || cur_op("[")) node = parse_subscript(std::move(node));
      else if (cur_op("(")) node = parse_call(std::move(node));
      else break;
    }
    return node;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (cur_op("|")) node = parse_filter(std::move(node), false);
      else if (cur_name("is")) node = parse_test(std::move(node));
      else if (cur_op("(")) node = parse_call(std::move(node));
      else break;
    }
    return node;
  }

  ExprPtr parse_subscript(ExprPtr node) {
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

  ExprPtr parse_subscribed() {
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

  void parse_call_args(CallSpec& spec) {
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

  ExprPtr parse_call(ExprPtr node) {
    DepthGuard guard(*this);
    auto n = std::make_unique<Expr>(ExprKind::Call, cur().line);
    n->a = std::move(node);
    parse_call_args(n->call);
    return finish(std::move(n));
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
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

  ExprPtr parse_test(ExprPtr node) {
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

  std::vector<Token> toks_;
  std::size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<MacroDef*> macro_stack_;
};

// ---------------------------------------------------------------- checks
// Filters and tests are looked up once. jinja2 fails at compile time on an
// unknown one unless it sits in an {% if %} / inline-if frame ("soft"), where
// the failure is deferred until the expression runs.

void resolve(Expr* e, bool soft);
void resolve(Body& body, bool soft);

void resolve_call(CallSpec& c, bool soft) {
  for (auto& a : c.args) resolve(a.get(), soft);
  for (auto& kv : c.kwargs) resolve(kv.second.get(), soft);
  resolve(c.dyn_args.get(), soft);
  resolve(c.dyn_kwargs.get(), soft);
}

void resolve(Expr* e, bool soft) {
  if (!e) return;
  if (e->kind == ExprKind::CondExpr) soft = true;
  if (e->kind == ExprKind::Filter) {
    e->filter = find_filter(e->name);
    if (!e->filter && !soft) syntax_error("No filter named '" + e->name + "'.", e->line);
  } else if (e->kind == ExprKind::Test) {
    e->test = find_test(e->name);
    if (!e->test && !soft) syntax_error("No test named '" + e->name + "'.", e->line);
  }
  resolve(e->a.get(), soft);
  resolve(e->b.get(), soft);
  resolve(e->c.get(), soft);
  for (auto& item : e->items) resolve(item.get(), soft);
  resolve_call(e->call, soft);
}

void resolve(Body& body, bool soft) {
  for (auto& s : body) {
    switch (s->kind) {
      case StmtKind::If:
        for (auto& [test, branch] : s->branches) {
          resolve(test.get(), true);
          resolve(branch, true);
        }
        resolve(s->else_body, true);
        break;
      case StmtKind::For:
        resolve(s->expr.get(), soft);
        resolve(s->test.get(), false);
        resolve(s->body, false);
        resolve(s->else_body, false);
        break;
      case StmtKind::Macro:
      case StmtKind::CallBlock:
        for (auto& d : s->macro.defaults) resolve(d.get(), false);
        resolve(s->expr.get(), soft);
        resolve(s->body, false);
        break;
      case StmtKind::SetBlock:
      case StmtKind::FilterBlock:
        resolve(s->expr.get(), false);
        resolve(s->body, false);
        break;
      case StmtKind::With:
        for (auto& v : s->values) resolve(v.get(), soft);
        resolve(s->body, false);
        break;
      case StmtKind::Scope: resolve(s->body, false); break;
      default: resolve(s->expr.get(), soft); break;
    }
  }
}

}  // namespace

std::unique_ptr<Program> parse(std::string_view source) {
  auto program = Parser(tokenize(source)).run();
  resolve(program->body, false);
  return program;
}

}  // namespace strata::tmpl
