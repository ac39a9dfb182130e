#pragma once
// Internal to the parser (parser*.cpp): the Parser class, a recursive-descent
// parser after jinja2/parser.py, whose members are defined by job in
// parser.cpp (token stream), parser_statements.cpp, parser_expressions.cpp
// and parser_postfix.cpp; and the filter / test checks (parser_resolve.cpp).
#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "template/ast.h"
#include "template/lexer.h"

namespace strata::tmpl::detail {

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

  static std::string show(const Token& t);
  [[noreturn]] void fail(const std::string& msg, int line = 0);
  const Token& expect(TokenType type);
  const Token& expect_op(std::string_view v);
  const Token& expect_name(std::string_view v);
  bool matches(const Token& t, const EndTokens& rules) const;

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxNesting) p.fail("template nested more than " + std::to_string(kMaxNesting) + " levels deep");
    }
    ~DepthGuard() { --p.depth_; }
  };

  ExprPtr finish(ExprPtr n);

  // ------------------------------------------------------------ statements
  Body subparse(const EndTokens& end_tokens);
  Body parse_statements(const EndTokens& end_tokens, bool drop_needle);
  StmtPtr parse_statement(const EndTokens& outer_end);
  StmtPtr parse_for();
  StmtPtr parse_if();
  StmtPtr parse_set();
  StmtPtr parse_with();
  StmtPtr parse_block();
  StmtPtr parse_print();
  void parse_signature(MacroDef& def);
  StmtPtr parse_macro();
  Body parse_macro_body(MacroDef& m, std::string_view end);
  StmtPtr parse_call_block();
  StmtPtr parse_filter_block();
  Target to_target(const Expr& e);
  Target parse_assign_target(bool with_tuple, bool name_only, const EndTokens& extra_end, bool with_namespace);

  // ------------------------------------------------------------ expressions
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_condexpr();
  ExprPtr binary(ExprKind kind, ExprPtr l, ExprPtr r, int line);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr arith(BinOp op, ExprPtr l, ExprPtr r, int line);
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr constant(Value v, int line);
  ExprPtr parse_primary();
  bool is_tuple_end(const EndTokens& extra) const;
  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const EndTokens& extra_end, bool explicit_parentheses);
  ExprPtr parse_literal_items(ExprKind kind, std::string_view open, std::string_view close);

  // ------------------------------------------------------------ postfix
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  void parse_call_args(CallSpec& spec);
  ExprPtr parse_call(ExprPtr node);
  ExprPtr parse_filter(ExprPtr node, bool start_inline);
  ExprPtr parse_test(ExprPtr node);

  std::vector<Token> toks_;
  std::size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<MacroDef*> macro_stack_;
};

// Resolves the filters and tests of a parsed body (parser_resolve.cpp).
void resolve(Body& body, bool soft);

}  // namespace strata::tmpl::detail
