// The compile-time checks of jinja2's code generator, run on the parsed
// Program: every filter and test name resolved to its builtin.
#include "template/builtins.h"
#include "template/error.h"
#include "template/parser_internal.h"

namespace strata::tmpl::detail {

namespace {

// Filters and tests are looked up once. jinja2 fails at compile time on an
// unknown one unless it sits in an {% if %} / inline-if frame ("soft"), where
// the failure is deferred until the expression runs.

void resolve(Expr* e, bool soft);

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

}  // namespace

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

}  // namespace strata::tmpl::detail
