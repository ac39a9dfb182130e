// Calls: macros (jinja2.runtime.Macro and the prologue the compiler writes),
// call arguments, callables, and filters and tests applied by name or as
// compiled.
#include <algorithm>

#include "template/builtins.h"
#include "template/error.h"
#include "template/interpreter.h"
#include "template/interpreter_internal.h"

namespace strata::tmpl {

using detail::Restore;

Value Interpreter::make_macro(const MacroDef& def, const Body& body, const ScopePtr& closure) {
  macro_scopes_.push_back(closure);
  const MacroDef* d = &def;
  const Body* b = &body;
  return Value::function("Macro '" + def.name + "'", [d, b, closure](Interpreter& in, CallArgs& args) {
    return in.call_macro(*d, *b, closure, args);
  });
}

// jinja2.runtime.Macro.__call__ and the prologue the compiler writes.
Value Interpreter::call_macro(const MacroDef& def, const Body& body, const ScopePtr& closure, CallArgs& args) {
  step();
  if (call_depth_ >= limits_.max_call_depth) render_error("maximum recursion depth exceeded in macro calls");
  ++call_depth_;
  struct Depth {
    int& d;
    ~Depth() { --d; }
  } depth_guard{call_depth_};

  auto scope = std::make_shared<Scope>(closure);
  const std::size_t n = def.params.size();
  std::vector<std::optional<Value>> bound(n);
  const std::size_t consumed = std::min(args.pos.size(), n);
  for (std::size_t i = 0; i < consumed; ++i) bound[i] = args.pos[i];

  auto take_kw = [&](const std::string& name) -> std::optional<Value> {
    for (auto it = args.kw.begin(); it != args.kw.end(); ++it)
      if (it->first == name) {
        Value v = std::move(it->second);
        args.kw.erase(it);
        return v;
      }
    return std::nullopt;
  };

  bool found_caller = false;
  if (consumed != n) {
    for (std::size_t i = consumed; i < n; ++i) {
      bound[i] = take_kw(def.params[i]);
      if (def.params[i] == "caller") found_caller = true;
    }
  } else {
    found_caller = std::find(def.params.begin(), def.params.end(), "caller") != def.params.end();
  }
  if (def.catch_caller && !found_caller) {
    std::optional<Value> caller = take_kw("caller");
    scope->set("caller", caller ? *caller : Value::undefined("No caller defined"));
  }
  if (def.catch_kwargs) {
    DictObj kw;
    for (auto& [k, v] : args.kw) kw.set(Value::string(k), v);
    scope->set("kwargs", Value::dict(std::move(kw)));
  } else if (!args.kw.empty()) {
    for (const auto& kv : args.kw)
      if (kv.first == "caller")
        render_error("macro '" + def.name +
                     "' was invoked with two values for the special caller argument. This is most likely a bug.");
    render_error("macro '" + def.name + "' takes no keyword argument '" + args.kw.front().first + "'");
  }
  if (def.catch_varargs) {
    std::vector<Value> rest;
    for (std::size_t i = n; i < args.pos.size(); ++i) rest.push_back(args.pos[i]);
    scope->set("varargs", Value::tuple(std::move(rest)));
  } else if (args.pos.size() > n) {
    render_error("macro '" + def.name + "' takes not more than " + std::to_string(n) + " argument(s)");
  }

  Restore<ScopePtr> sc(scope_, scope);
  const std::size_t first_default = n - def.defaults.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (bound[i]) {
      scope->set(def.params[i], *bound[i]);
    } else if (i >= first_default) {
      scope->set(def.params[i], eval(*def.defaults[i - first_default]));
    } else {
      scope->set(def.params[i], Value::undefined("parameter '" + def.params[i] + "' was not provided"));
    }
  }
  std::string buf;
  Restore<std::string*> out(out_, &buf);
  exec(body);
  return Value::string(std::move(buf));
}

CallArgs Interpreter::eval_args(const CallSpec& spec) {
  CallArgs args;
  for (const auto& a : spec.args) args.pos.push_back(eval(*a));
  if (spec.dyn_args)
    for (Value& v : iterate(*this, eval(*spec.dyn_args))) args.pos.push_back(std::move(v));
  for (const auto& [k, v] : spec.kwargs) args.kw.emplace_back(k, eval(*v));
  if (spec.dyn_kwargs) {
    const Value d = eval(*spec.dyn_kwargs);
    if (!d.is_dict()) {
      if (!d.is_undefined()) render_error("argument after ** must be a mapping, not " + type_name(d));
    } else {
      for (const auto& [k, v] : d.dict().items()) {
        if (!k.is_string()) render_error("keywords must be strings");
        args.kw.emplace_back(k.str(), v);
      }
    }
  }
  return args;
}

Value Interpreter::eval_call(const Expr& e, const Value* caller) {
  const Value callee = eval(*e.a);
  CallArgs args = eval_args(e.call);
  if (caller) args.kw.emplace_back("caller", *caller);
  return call(callee, args);
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  switch (callee.type()) {
    case Value::Type::Function: return callee.function().fn(*this, args);
    case Value::Type::Undefined: undefined_error(callee);
    case Value::Type::Object: return callee.object().call(*this, args);
    default: render_error("'" + type_name(callee) + "' object is not callable");
  }
}

Value Interpreter::call_filter(const std::string& name, const Value& subject, CallArgs& args) {
  const FilterDef* f = find_filter(name);
  if (!f) render_error("No filter named '" + name + "' found.");
  return f->fn(*this, subject, args);
}

bool Interpreter::call_test(const std::string& name, const Value& subject, CallArgs& args) {
  const TestDef* t = find_test(name);
  if (!t) render_error("No test named '" + name + "' found.");
  return t->fn(*this, subject, args);
}

Value Interpreter::apply_filter(const Expr& e, const Value& subject) {
  if (!e.filter) render_error("No filter named '" + e.name + "' found.");
  CallArgs args = eval_args(e.call);
  return e.filter->fn(*this, subject, args);
}

Value Interpreter::apply_filter_chain(const Expr* chain, const Value& subject) {
  if (!chain) return subject;
  return apply_filter(*chain, chain->a ? apply_filter_chain(chain->a.get(), subject) : subject);
}

}  // namespace strata::tmpl
