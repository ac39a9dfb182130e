#pragma once
// Jinja2 lexer with the options transformers renders chat templates with:
// trim_blocks (the first newline after a block tag or comment is dropped),
// lstrip_blocks (spaces and tabs before a block tag or comment at the start
// of a line are dropped), "-" / "+" whitespace control on every tag,
// {% raw %}, comments, "\r\n" and "\r" read as "\n", and a single trailing
// newline removed (keep_trailing_newline=False). Mirrors jinja2/lexer.py.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::tmpl {

enum class TokenType : uint8_t {
  Data,        // template text
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,      // value: the decoded literal
  Integer,
  Float,
  Operator,    // value: "+", "//", "==", "(", ...
  Eof,
};

struct Token {
  TokenType type;
  std::string value;
  int64_t ival = 0;
  double fval = 0;
  int line = 1;
};

// Throws TemplateError (syntax) on an unterminated comment or raw block, a
// character that starts no token, unbalanced brackets, or a bad string escape.
std::vector<Token> tokenize(std::string_view source);

const char* describe(TokenType type);

}  // namespace strata::tmpl
