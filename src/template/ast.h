#pragma once
// The parsed template: expression and statement nodes as jinja2/nodes.py has
// them (one struct per family, a kind tag, and the fields that kind uses).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace strata::tmpl {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind : uint8_t {
  Const,     // value
  Name,      // name
  List,      // items
  Tuple,     // items
  Dict,      // items: key, value, key, value, ...
  Getattr,   // a.name
  Getitem,   // a[b]
  Slice,     // a:b:c (each may be null); only as a Getitem argument
  Call,      // a(call)
  Filter,    // a|name(call); a is null for the body of a filter block / set block
  Test,      // a is name(call)
  Not,       // not a
  Neg,       // -a
  Pos,       // +a
  Binary,    // a op b
  And,       // a and b
  Or,        // a or b
  Concat,    // items joined with ~
  Compare,   // items[0] ops[0] items[1] ops[1] items[2] ...
  CondExpr,  // b if a else c (c may be null)
};

enum class BinOp : uint8_t { Add, Sub, Mul, Div, FloorDiv, Mod, Pow };
enum class CmpOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };

struct CallSpec {
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args;    // *args
  ExprPtr dyn_kwargs;  // **kwargs
};

struct FilterDef;
struct TestDef;

struct Expr {
  ExprKind kind;
  int line = 0;
  int depth = 1;  // longest path to a leaf
  Value value;
  std::string name;
  ExprPtr a, b, c;
  std::vector<ExprPtr> items;
  std::vector<CmpOp> ops;
  BinOp op = BinOp::Add;
  CallSpec call;
  // Filter / Test: resolved when the template is compiled; null when the
  // name is unknown but only used inside an {% if %} or inline if (jinja2
  // then raises only when it is reached).
  const FilterDef* filter = nullptr;
  const TestDef* test = nullptr;

  Expr(ExprKind k, int l) : kind(k), line(l) {}
};

// Assignment targets: a name, a tuple of targets, or namespace.attr.
struct Target {
  enum class Kind : uint8_t { Name, Tuple, NsRef } kind = Kind::Name;
  std::string name;
  std::string attr;  // NsRef
  std::vector<Target> items;
  int line = 0;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind : uint8_t {
  Text,         // text
  Print,        // {{ expr }}
  If,           // branches (test, body) ..., else_body
  For,          // for target in expr [if test] [recursive]: body, else_body
  Set,          // set target = expr
  SetBlock,     // set target [| filter]: body  (expr: the filter chain or null)
  Macro,        // macro name(params=defaults): body
  CallBlock,    // call(params) expr: body
  FilterBlock,  // filter expr: body
  With,         // with targets = values: body
  Scope,        // body rendered in place: {% generation %}, or {% block %} (text == "block": sees only the top level)
  Break,
  Continue,
};

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  bool catch_caller = false;      // body refers to `caller`
  bool catch_varargs = false;     // ... `varargs`
  bool catch_kwargs = false;      // ... `kwargs`
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr test;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  Target target;
  bool recursive = false;
  MacroDef macro;  // Macro; CallBlock: the caller's signature
  std::vector<Target> targets;
  std::vector<ExprPtr> values;

  Stmt(StmtKind k, int l) : kind(k), line(l) {}
};

struct Program {
  Body body;
};

}  // namespace strata::tmpl
