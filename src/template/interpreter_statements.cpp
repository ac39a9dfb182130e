// Statement execution: text, print, if, for (with jinja2's LoopContext),
// set, set blocks, filter blocks, with, block / generation scopes,
// break / continue, and assignment to targets.
#include <functional>

#include "template/error.h"
#include "template/interpreter.h"
#include "template/interpreter_internal.h"

namespace strata::tmpl {

using detail::Restore;

// jinja2's LoopContext: one per {% for %}, updated as the loop advances.
class LoopObj : public Object {
 public:
  LoopObj(std::vector<Value> items, int depth) : items_(std::move(items)), depth_(depth) {}

  std::string type_name() const override { return "LoopContext"; }
  std::optional<int64_t> size() const override { return static_cast<int64_t>(items_.size()); }
  std::string repr() const override {
    return "<LoopContext " + std::to_string(index_ + 1) + "/" + std::to_string(items_.size()) + ">";
  }

  Value getattr(const std::string& name) override {
    const auto n = static_cast<int64_t>(items_.size());
    const auto i = static_cast<int64_t>(index_);
    if (name == "index") return Value::integer(i + 1);
    if (name == "index0") return Value::integer(i);
    if (name == "revindex") return Value::integer(n - i);
    if (name == "revindex0") return Value::integer(n - i - 1);
    if (name == "first") return Value::boolean(i == 0);
    if (name == "last") return Value::boolean(i == n - 1);
    if (name == "length") return Value::integer(n);
    if (name == "depth") return Value::integer(depth_);
    if (name == "depth0") return Value::integer(depth_ - 1);
    if (name == "previtem") return i > 0 ? items_[index_ - 1] : Value::undefined("there is no previous item");
    if (name == "nextitem") return i + 1 < n ? items_[index_ + 1] : Value::undefined("there is no next item");
    if (name == "cycle") {
      const int64_t at = i;
      return Value::function("method 'cycle'", [at](Interpreter&, CallArgs& args) {
        if (args.pos.empty()) render_error("no items for cycling given");
        return args.pos[static_cast<std::size_t>(at % static_cast<int64_t>(args.pos.size()))];
      });
    }
    if (name == "changed") {
      auto self = std::static_pointer_cast<LoopObj>(self_.lock());
      return Value::function("method 'changed'", [self](Interpreter&, CallArgs& args) {
        Value v = Value::tuple(args.pos);
        if (!self || (self->has_last_ && equals(self->last_changed_, v))) return Value::boolean(false);
        self->last_changed_ = v;
        self->has_last_ = true;
        return Value::boolean(true);
      });
    }
    return Object::getattr(name);
  }

  Value call(Interpreter& in, CallArgs& args) override {
    if (!recurse_) render_error("Tried to call non recursive loop.  Maybe you forgot the 'recursive' modifier.");
    if (args.pos.size() != 1 || !args.kw.empty()) render_error("loop() takes exactly one argument");
    return recurse_(in, args.pos[0]);
  }

  std::vector<Value> items_;
  std::size_t index_ = 0;
  int depth_;
  std::function<Value(Interpreter&, const Value&)> recurse_;
  std::weak_ptr<Object> self_;
  Value last_changed_;
  bool has_last_ = false;
};

Interpreter::Flow Interpreter::exec(const Body& body) {
  for (const auto& s : body) {
    const Flow f = exec(*s);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

std::string Interpreter::capture(const Body& body, const ScopePtr& scope, Flow* flow) {
  std::string buf;
  Restore<std::string*> out(out_, &buf);
  Restore<ScopePtr> sc(scope_, scope);
  const Flow f = exec(body);
  if (flow) *flow = f;
  return buf;
}

Interpreter::Flow Interpreter::exec(const Stmt& s) {
  const Nesting nesting(*this);
  try {
    switch (s.kind) {
      case StmtKind::Text: emit(s.text); return Flow::Normal;
      case StmtKind::Print: emit(to_str(eval(*s.expr))); return Flow::Normal;
      case StmtKind::If:
        for (const auto& [test, body] : s.branches)
          if (truthy(eval(*test))) return exec(body);
        return exec(s.else_body);
      case StmtKind::For: return exec_for(s, eval(*s.expr), 1, scope_);
      case StmtKind::Set: assign(s.target, eval(*s.expr)); return Flow::Normal;
      case StmtKind::SetBlock: {
        Flow f = Flow::Normal;
        std::string text = capture(s.body, std::make_shared<Scope>(scope_), &f);
        if (f != Flow::Normal) return f;
        assign(s.target, apply_filter_chain(s.expr.get(), Value::string(std::move(text))));
        return Flow::Normal;
      }
      case StmtKind::Macro: scope_->set(s.macro.name, make_macro(s.macro, s.body, scope_)); return Flow::Normal;
      case StmtKind::CallBlock: {
        const Value caller = make_macro(s.macro, s.body, scope_);
        emit(to_str(eval_call(*s.expr, &caller)));
        return Flow::Normal;
      }
      case StmtKind::FilterBlock: {
        Flow f = Flow::Normal;
        std::string text = capture(s.body, std::make_shared<Scope>(scope_), &f);
        if (f != Flow::Normal) return f;
        emit(to_str(apply_filter_chain(s.expr.get(), Value::string(std::move(text)))));
        return Flow::Normal;
      }
      case StmtKind::With: {
        std::vector<Value> values;
        for (const auto& v : s.values) values.push_back(eval(*v));
        auto inner = std::make_shared<Scope>(scope_);
        Restore<ScopePtr> sc(scope_, inner);
        for (std::size_t i = 0; i < s.targets.size(); ++i) assign(s.targets[i], values[i]);
        return exec(s.body);
      }
      case StmtKind::Scope: {
        // {% block %} sees the template's top level; {% generation %} is a
        // call block, so it sees where it stands.
        auto inner = std::make_shared<Scope>(s.text == "block" ? root_ : scope_);
        Restore<ScopePtr> sc(scope_, inner);
        exec(s.body);
        return Flow::Normal;
      }
      case StmtKind::Break: return Flow::Break;
      case StmtKind::Continue: return Flow::Continue;
    }
  } catch (const TemplateError& e) {
    if (e.line() == 0) throw e.with_line(s.line);
    throw;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, const Value& iterable, int depth, ScopePtr parent) {
  std::vector<Value> items = iterate(*this, iterable);
  if (s.test) {
    std::vector<Value> kept;
    for (Value& item : items) {
      step();
      Restore<ScopePtr> sc(scope_, std::make_shared<Scope>(parent));
      assign(s.target, item);
      if (truthy(eval(*s.test))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  auto loop = std::make_shared<LoopObj>(std::move(items), depth);
  loop->self_ = loop;
  if (s.recursive) {
    const Stmt* stmt = &s;
    loop->recurse_ = [stmt, depth, parent](Interpreter& in, const Value& sub) {
      std::string buf;
      Restore<std::string*> out(in.out_, &buf);
      in.exec_for(*stmt, sub, depth + 1, parent);
      return Value::string(std::move(buf));
    };
  }
  const Value loop_value = Value::object(loop);
  // jinja2 clears its "no iteration" flag at the end of the body, so the
  // else block also runs when every pass ended in continue or break.
  bool completed = false;
  for (std::size_t i = 0; i < loop->items_.size(); ++i) {
    step();
    loop->index_ = i;
    auto iteration = std::make_shared<Scope>(parent);
    Restore<ScopePtr> sc(scope_, iteration);
    assign(s.target, loop->items_[i]);
    iteration->set("loop", loop_value);
    const Flow f = exec(s.body);
    if (f == Flow::Break) break;
    if (f == Flow::Normal) completed = true;
  }
  if (!completed && !s.else_body.empty()) {
    Restore<ScopePtr> sc(scope_, std::make_shared<Scope>(parent));
    return exec(s.else_body);
  }
  return Flow::Normal;
}

void Interpreter::assign(const Target& t, const Value& v) {
  switch (t.kind) {
    case Target::Kind::Name: scope_->set(t.name, v); return;
    case Target::Kind::Tuple: {
      std::vector<Value> items = iterate(*this, v);
      if (items.size() < t.items.size())
        render_error("not enough values to unpack (expected " + std::to_string(t.items.size()) + ", got " +
                     std::to_string(items.size()) + ")");
      if (items.size() > t.items.size())
        render_error("too many values to unpack (expected " + std::to_string(t.items.size()) + ")");
      for (std::size_t i = 0; i < items.size(); ++i) assign(t.items[i], items[i]);
      return;
    }
    case Target::Kind::NsRef: {
      Value ns = lookup(t.name);
      if (!ns.is_namespace()) render_error("cannot assign attribute on non-namespace object");
      ns.ns().attrs.set(Value::string(t.attr), v);
      return;
    }
  }
}

}  // namespace strata::tmpl
