// Expression evaluation: name lookup through the scopes, the context and the
// globals, and eval() over every expression kind.
#include <limits>

#include "template/builtins.h"
#include "template/error.h"
#include "template/interpreter.h"
#include "template/interpreter_internal.h"

namespace strata::tmpl {

Value Interpreter::lookup(const std::string& name) {
  for (const Scope* s = scope_.get(); s; s = s->parent.get())
    if (const Value* v = s->find(name)) return *v;
  if (const Value* v = context_.find(std::string_view(name))) return *v;
  if (auto it = globals_.find(name); it != globals_.end()) return it->second;
  if (std::optional<Value> g = find_global(name)) {
    globals_.emplace(name, *g);
    return *g;
  }
  return Value::undefined("'" + name + "' is undefined");
}

Value Interpreter::eval(const Expr& e) {
  const Nesting nesting(*this);
  switch (e.kind) {
    case ExprKind::Const: return e.value;
    case ExprKind::Name: return lookup(e.name);
    case ExprKind::List:
    case ExprKind::Tuple: {
      std::vector<Value> items;
      items.reserve(e.items.size());
      for (const auto& item : e.items) items.push_back(eval(*item));
      return e.kind == ExprKind::List ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::Dict: {
      DictObj d;
      for (std::size_t i = 0; i + 1 < e.items.size(); i += 2) {
        Value k = eval(*e.items[i]);
        d.set(k, eval(*e.items[i + 1]));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::Getattr: return getattr(eval(*e.a), e.name);
    case ExprKind::Getitem: {
      const Value obj = eval(*e.a);
      if (e.b->kind == ExprKind::Slice) return slice(obj, *e.b);
      return getitem(obj, eval(*e.b));
    }
    case ExprKind::Slice: render_error("slice outside a subscript");
    case ExprKind::Call: return eval_call(e, nullptr);
    case ExprKind::Filter: return apply_filter(e, e.a ? eval(*e.a) : Value::string(""));
    case ExprKind::Test: {
      if (!e.test) render_error("No test named '" + e.name + "' found.");
      const Value subject = eval(*e.a);
      CallArgs args = eval_args(e.call);
      return Value::boolean(e.test->fn(*this, subject, args));
    }
    case ExprKind::Not: return Value::boolean(!truthy(eval(*e.a)));
    case ExprKind::Neg:
    case ExprKind::Pos: {
      const Value v = eval(*e.a);
      if (v.is_undefined()) undefined_error(v);
      if (v.is_float()) return Value::number(e.kind == ExprKind::Neg ? -v.as_float() : v.as_float());
      if (v.is_integral()) {
        const int64_t i = v.as_int();
        if (e.kind == ExprKind::Pos) return Value::integer(i);
        if (i == std::numeric_limits<int64_t>::min()) render_error("integer overflow");
        return Value::integer(-i);
      }
      render_error(std::string("bad operand type for unary ") + (e.kind == ExprKind::Neg ? "-" : "+") + ": '" +
                   type_name(v) + "'");
    }
    case ExprKind::Binary: {
      const Value l = eval(*e.a);
      const Value r = eval(*e.b);
      return binary(e.op, l, r);
    }
    case ExprKind::And: {
      Value l = eval(*e.a);
      return truthy(l) ? eval(*e.b) : l;
    }
    case ExprKind::Or: {
      Value l = eval(*e.a);
      return truthy(l) ? l : eval(*e.b);
    }
    case ExprKind::Concat: {
      std::string s;
      for (const auto& item : e.items) {
        s += to_str(eval(*item));
        check_size(s.size());
      }
      return Value::string(std::move(s));
    }
    case ExprKind::Compare: {
      Value left = eval(*e.items[0]);
      for (std::size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.items[i + 1]);
        if (!compare(e.ops[i], left, right)) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case ExprKind::CondExpr:
      if (truthy(eval(*e.a))) return eval(*e.b);
      if (e.c) return eval(*e.c);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
  }
  return Value();
}

}  // namespace strata::tmpl
