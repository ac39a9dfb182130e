#include "template/interpreter.h"

#include <cmath>
#include <limits>

#include "template/builtins.h"
#include "template/error.h"
#include "template/format.h"
#include "template/text.h"

namespace strata::tmpl {

// ---------------------------------------------------------------- scopes

struct Interpreter::Scope {
  explicit Scope(ScopePtr p) : parent(std::move(p)) {}
  ScopePtr parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(const std::string& name) const {
    for (const auto& kv : vars)
      if (kv.first == name) return &kv.second;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& kv : vars)
      if (kv.first == name) {
        kv.second = std::move(v);
        return;
      }
    vars.emplace_back(name, std::move(v));
  }
};

// ---------------------------------------------------------------- loop

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

// ---------------------------------------------------------------- setup

Interpreter::Interpreter(const Program& program, const DictObj& context, Clock clock, RenderLimits limits)
    : program_(program), context_(context), clock_(std::move(clock)), limits_(limits) {}

Interpreter::~Interpreter() {
  for (auto& ns : namespaces_) ns->attrs.clear();
  for (auto& scope : macro_scopes_) scope->vars.clear();
}

std::string Interpreter::render() {
  root_ = std::make_shared<Scope>(nullptr);
  scope_ = root_;
  std::string out;
  out_ = &out;
  exec(program_.body);
  out_ = nullptr;
  return out;
}

void Interpreter::step() {
  if (++steps_ > limits_.max_steps)
    render_error("the template ran more than " + std::to_string(limits_.max_steps) + " loop iterations and macro calls");
}

void Interpreter::check_size(std::size_t size) {
  if (size > limits_.max_string)
    render_error("the template built a value of " + std::to_string(size) + " bytes or items, more than the limit of " +
                 std::to_string(limits_.max_string));
}

void Interpreter::emit(const std::string& s) {
  out_->append(s);
  if (out_->size() > limits_.max_output)
    render_error("the rendered text is larger than " + std::to_string(limits_.max_output) + " bytes");
}

Value Interpreter::make_namespace(DictObj attrs) {
  auto ns = std::make_shared<NamespaceObj>();
  ns->attrs = std::move(attrs);
  namespaces_.push_back(ns);
  return Value::ns(std::move(ns));
}

// ---------------------------------------------------------------- statements

Interpreter::Flow Interpreter::exec(const Body& body) {
  for (const auto& s : body) {
    const Flow f = exec(*s);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

namespace {
// Restores the current scope and output buffer on every exit path.
template <class T>
struct Restore {
  T& slot;
  T saved;
  Restore(T& s, T v) : slot(s), saved(s) { slot = std::move(v); }
  ~Restore() { slot = std::move(saved); }
};
}  // namespace

std::string Interpreter::capture(const Body& body, const ScopePtr& scope, Flow* flow) {
  std::string buf;
  Restore<std::string*> out(out_, &buf);
  Restore<ScopePtr> sc(scope_, scope);
  const Flow f = exec(body);
  if (flow) *flow = f;
  return buf;
}

Interpreter::Flow Interpreter::exec(const Stmt& s) {
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

// ---------------------------------------------------------------- macros

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

// ---------------------------------------------------------------- expressions

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

namespace {
// Attributes every Python object has; the sandbox answers them (leading
// underscore) with an Undefined that raises SecurityError when used.
bool is_object_dunder(const std::string& name) {
  static const char* const kNames[] = {
      "__class__",    "__delattr__",  "__dir__",          "__doc__",      "__eq__",           "__format__",
      "__ge__",       "__getattribute__", "__gt__",       "__hash__",     "__init__",         "__init_subclass__",
      "__le__",       "__lt__",       "__ne__",           "__new__",      "__reduce__",       "__reduce_ex__",
      "__repr__",     "__setattr__",  "__sizeof__",       "__str__",      "__subclasshook__"};
  if (name.size() < 4 || name[0] != '_') return false;
  for (const char* n : kNames)
    if (name == n) return true;
  return false;
}
}  // namespace

Value Interpreter::getattr(const Value& obj, const std::string& name) {
  if (is_object_dunder(name))
    return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.", true);
  switch (obj.type()) {
    case Value::Type::Undefined: undefined_error(obj);
    case Value::Type::Dict: {
      if (std::optional<Value> m = find_method(obj, name)) return *m;
      if (const Value* v = obj.dict().find(std::string_view(name))) return *v;
      break;
    }
    case Value::Type::String:
    case Value::Type::List:
    case Value::Type::Tuple:
      if (std::optional<Value> m = find_method(obj, name)) return *m;
      break;
    case Value::Type::Namespace:
      if (const Value* v = obj.ns().attrs.find(std::string_view(name))) return *v;
      break;
    case Value::Type::Object: return obj.object().getattr(name);
    default: break;
  }
  return Value::undefined("'" + object_type_repr(obj) + "' has no attribute '" + name + "'");
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
  auto missing = [&]() {
    if (key.is_string()) return Value::undefined("'" + object_type_repr(obj) + "' has no attribute '" + key.str() + "'");
    return Value::undefined("'" + object_type_repr(obj) + "' has no element " + repr(key));
  };
  auto index = [&](int64_t size) -> std::optional<std::size_t> {
    int64_t i = key.as_int();
    if (i < 0) i += size;
    if (i < 0 || i >= size) return std::nullopt;
    return static_cast<std::size_t>(i);
  };
  switch (obj.type()) {
    case Value::Type::Undefined: undefined_error(obj);
    case Value::Type::Dict: {
      if (!key.is_list() && !key.is_dict())
        if (const Value* v = obj.dict().find(key)) return *v;
      break;
    }
    case Value::Type::List:
    case Value::Type::Tuple:
      if (key.is_integral()) {
        if (auto i = index(static_cast<int64_t>(obj.items().size()))) return obj.items()[*i];
        return missing();
      }
      break;
    case Value::Type::String:
      if (key.is_integral()) {
        const std::u32string cps = text::decode(obj.str());
        if (auto i = index(static_cast<int64_t>(cps.size()))) {
          std::string ch;
          text::append(ch, cps[*i]);
          return Value::string(std::move(ch), obj.safe());
        }
        return missing();
      }
      break;
    default: break;
  }
  if (key.is_string()) {
    // The sandbox falls back to getattr for a string subscript.
    switch (obj.type()) {
      case Value::Type::Dict:
      case Value::Type::String:
      case Value::Type::List:
      case Value::Type::Tuple:
        if (std::optional<Value> m = find_method(obj, key.str())) return *m;
        break;
      case Value::Type::Namespace:
      case Value::Type::Object: return getattr(obj, key.str());
      default: break;
    }
  }
  return missing();
}

namespace {

// PySlice_AdjustIndices: the positions a[start:stop:step] selects.
std::vector<std::size_t> slice_positions(int64_t len, std::optional<int64_t> start, std::optional<int64_t> stop,
                                         int64_t step) {
  std::vector<std::size_t> out;
  int64_t b, e;
  if (step > 0) {
    b = start.value_or(0);
    e = stop.value_or(len);
    if (b < 0) b = std::max<int64_t>(b + len, 0);
    else if (b > len) b = len;
    if (e < 0) e = std::max<int64_t>(e + len, 0);
    else if (e > len) e = len;
    for (int64_t i = b; i < e; i += step) out.push_back(static_cast<std::size_t>(i));
  } else {
    b = start.value_or(len - 1);
    e = stop.value_or(-1 - len);
    if (b < 0) b = std::max<int64_t>(b + len, -1);
    else if (b >= len) b = len - 1;
    if (e < 0) e = std::max<int64_t>(e + len, -1);
    else if (e >= len) e = len - 1;
    for (int64_t i = b; i > e; i += step) out.push_back(static_cast<std::size_t>(i));
  }
  return out;
}

}  // namespace

// jinja2 compiles a[b:c] to plain Python subscription (not the sandbox's
// getitem), so every failure is an error rather than an Undefined.
Value Interpreter::slice(const Value& obj, const Expr& sl) {
  const Value start = sl.a ? eval(*sl.a) : Value::none();
  const Value stop = sl.b ? eval(*sl.b) : Value::none();
  const Value stepv = sl.c ? eval(*sl.c) : Value::none();
  if (obj.is_undefined()) undefined_error(obj);
  if (obj.is_dict()) render_error("unhashable type: 'slice'");
  if (!obj.is_sequence() && !obj.is_string()) render_error("'" + type_name(obj) + "' object is not subscriptable");
  auto bound = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (v.is_integral()) return v.as_int();
    if (v.is_undefined()) undefined_error(v);
    render_error("slice indices must be integers or None or have an __index__ method");
  };
  const auto b = bound(start);
  const auto e = bound(stop);
  const auto st = bound(stepv);
  const int64_t step = st.value_or(1);
  if (step == 0) render_error("slice step cannot be zero");
  if (obj.is_sequence()) {
    const auto& items = obj.items();
    std::vector<Value> out;
    for (std::size_t i : slice_positions(static_cast<int64_t>(items.size()), b, e, step)) out.push_back(items[i]);
    return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }
  const std::u32string cps = text::decode(obj.str());
  std::u32string out;
  for (std::size_t i : slice_positions(static_cast<int64_t>(cps.size()), b, e, step)) out += cps[i];
  return Value::string(text::encode(out), obj.safe());
}

Value Interpreter::eval(const Expr& e) {
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

bool Interpreter::compare(CmpOp op, const Value& l, const Value& r) {
  switch (op) {
    case CmpOp::Eq: return equals(l, r);
    case CmpOp::Ne: return !equals(l, r);
    case CmpOp::Lt: return less(l, r);
    case CmpOp::Gt: return less(r, l);
    case CmpOp::Le: return less(l, r) || equals(l, r);
    case CmpOp::Ge: return less(r, l) || equals(l, r);
    case CmpOp::In:
    case CmpOp::NotIn: {
      bool found = false;
      switch (r.type()) {
        case Value::Type::Undefined: break;
        case Value::Type::String:
          if (!l.is_string())
            render_error("'in <string>' requires string as left operand, not " + type_name(l));
          found = r.str().find(l.str()) != std::string::npos;
          break;
        case Value::Type::List:
        case Value::Type::Tuple:
          for (const Value& item : r.items())
            if (equals(item, l)) {
              found = true;
              break;
            }
          break;
        case Value::Type::Dict:
          check_hashable(l);
          found = r.dict().find(l) != nullptr;
          break;
        case Value::Type::Object: found = r.object().contains(*this, l); break;
        default: render_error("argument of type '" + type_name(r) + "' is not iterable");
      }
      return op == CmpOp::In ? found : !found;
    }
  }
  return false;
}

namespace {

[[noreturn]] void unsupported(const char* op, const Value& l, const Value& r) {
  render_error(std::string("unsupported operand type(s) for ") + op + ": '" + type_name(l) + "' and '" +
               type_name(r) + "'");
}

[[noreturn]] void overflow() {
  render_error("integer overflow (Python integers are unbounded; this engine uses 64 bits)");
}

int64_t add_int(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}
int64_t sub_int(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}
int64_t mul_int(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

// Python's float divmod.
std::pair<double, double> float_divmod(double a, double b) {
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0) {
    if ((b < 0) != (mod < 0)) {
      mod += b;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, b);
  }
  double floordiv;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, a / b);
  }
  return {floordiv, mod};
}

std::string repeat(const std::string& s, int64_t n) {
  std::string out;
  if (n <= 0) return out;
  out.reserve(s.size() * static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) out += s;
  return out;
}

}  // namespace

Value Interpreter::binary(BinOp op, const Value& l, const Value& r) {
  if (l.is_undefined()) undefined_error(l);
  // str % anything is str.__mod__, which takes an Undefined as a mapping.
  if (op == BinOp::Mod && l.is_string()) return Value::string(percent_format(*this, l, r), l.safe());
  if (r.is_undefined()) undefined_error(r);
  static const char* const kSymbols[] = {"+", "-", "*", "/", "//", "%", "**"};
  const char* sym = kSymbols[static_cast<int>(op)];

  if (l.is_number() && r.is_number()) {
    const bool ints = l.is_integral() && r.is_integral();
    const int64_t a = ints ? l.as_int() : 0, b = ints ? r.as_int() : 0;
    const double x = l.as_float(), y = r.as_float();
    switch (op) {
      case BinOp::Add:
        if (ints) return Value::integer(add_int(a, b));
        return Value::number(x + y);
      case BinOp::Sub:
        if (ints) return Value::integer(sub_int(a, b));
        return Value::number(x - y);
      case BinOp::Mul:
        if (ints) return Value::integer(mul_int(a, b));
        return Value::number(x * y);
      case BinOp::Div:
        if (y == 0) render_error(ints ? "division by zero" : "float division by zero");
        return Value::number(x / y);
      case BinOp::FloorDiv:
      case BinOp::Mod:
        if (ints) {
          if (b == 0) render_error("integer division or modulo by zero");
          if (a == std::numeric_limits<int64_t>::min() && b == -1) overflow();
          int64_t q = a / b, m = a % b;
          if (m != 0 && ((m < 0) != (b < 0))) {
            q -= 1;
            m += b;
          }
          return Value::integer(op == BinOp::FloorDiv ? q : m);
        } else {
          if (y == 0) render_error(op == BinOp::Mod ? "float modulo" : "float floor division by zero");
          const auto [q, m] = float_divmod(x, y);
          return Value::number(op == BinOp::FloorDiv ? q : m);
        }
      case BinOp::Pow:
        if (ints && b >= 0) {
          int64_t acc = 1, base = a, e = b;
          while (e > 0) {
            if (e & 1) acc = mul_int(acc, base);
            e >>= 1;
            if (e > 0) base = mul_int(base, base);
          }
          return Value::integer(acc);
        }
        if (x == 0 && y < 0) render_error("0.0 cannot be raised to a negative power");
        if (x < 0 && y != std::floor(y)) render_error("complex results are not supported");
        return Value::number(std::pow(x, y));
    }
  }

  if (op == BinOp::Add) {
    if (l.is_string() && r.is_string()) {
      check_size(l.str().size() + r.str().size());
      if (l.safe() == r.safe()) return Value::string(l.str() + r.str(), l.safe());
      // markupsafe: Markup + str escapes the str (either side).
      if (l.safe()) return Value::string(l.str() + text::html_escape(r.str()), true);
      return Value::string(text::html_escape(l.str()) + r.str(), true);
    }
    if ((l.is_list() && r.is_list()) || (l.is_tuple() && r.is_tuple())) {
      check_size(l.items().size() + r.items().size());
      std::vector<Value> items = l.items();
      items.insert(items.end(), r.items().begin(), r.items().end());
      return l.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    if (l.is_string() || r.is_string()) {
      const Value& other = l.is_string() ? r : l;
      render_error("can only concatenate str (not \"" + type_name(other) + "\") to str");
    }
    unsupported(sym, l, r);
  }
  if (op == BinOp::Mul) {
    const Value* seq = (l.is_string() || l.is_sequence()) ? &l : (r.is_string() || r.is_sequence()) ? &r : nullptr;
    const Value* count = seq == &l ? &r : &l;
    if (seq && count->is_integral()) {
      const int64_t k = count->as_int();
      if (seq->is_string()) {
        if (k > 0) check_size(seq->str().size() * static_cast<std::size_t>(k));
        return Value::string(repeat(seq->str(), k), seq->safe());
      }
      std::vector<Value> items;
      if (k > 0) {
        check_size(seq->items().size() * static_cast<std::size_t>(k));
        for (int64_t i = 0; i < k; ++i) items.insert(items.end(), seq->items().begin(), seq->items().end());
      }
      return seq->is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    unsupported(sym, l, r);
  }
  if (op == BinOp::Mod && l.is_string()) return Value::string(percent_format(*this, l, r), l.safe());
  unsupported(sym, l, r);
}

}  // namespace strata::tmpl
