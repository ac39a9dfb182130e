#pragma once
// Renders a Program: statements, expressions, scoping and calls with the
// semantics jinja2 compiles them to (for-loop bodies get a fresh scope each
// iteration, {% if %} does not scope, macros close over where they are
// defined, top-level assignments are seen by macros at call time), the
// sandbox's attribute rules (d.items is the method, d.key the item; list and
// dict mutators raise SecurityError), and Python operators.
//
// One Interpreter renders once; it is not shared between threads.
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "template/ast.h"
#include "template/limits.h"
#include "template/value.h"
#include "util/stack_room.h"

namespace strata::tmpl {

using Clock = std::function<std::tm()>;  // local time for strftime_now

class Interpreter {
 public:
  Interpreter(const Program& program, const DictObj& context, Clock clock, RenderLimits limits = {});
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  std::string render();

  // For the builtins.
  Value call(const Value& callee, CallArgs& args);
  Value call_filter(const std::string& name, const Value& subject, CallArgs& args);
  bool call_test(const std::string& name, const Value& subject, CallArgs& args);
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  std::tm now() const { return clock_(); }
  Value make_namespace(DictObj attrs);
  void step();                         // one unit of the work budget
  void check_size(std::size_t size);   // a string or list about to be built
  const RenderLimits& limits() const { return limits_; }
  // Python operators: a + b, a % b, ...; a == b, a in b, ...
  Value binary(BinOp op, const Value& l, const Value& r);
  bool compare(CmpOp op, const Value& l, const Value& r);

 private:
  struct Scope;
  using ScopePtr = std::shared_ptr<Scope>;
  enum class Flow { Normal, Break, Continue };
  friend class LoopObj;

  Flow exec(const Body& body);
  Flow exec(const Stmt& s);
  Flow exec_for(const Stmt& s, const Value& iterable, int depth, ScopePtr parent);
  std::string capture(const Body& body, const ScopePtr& scope, Flow* flow = nullptr);
  void assign(const Target& t, const Value& v);
  Value make_macro(const MacroDef& def, const Body& body, const ScopePtr& closure);
  Value call_macro(const MacroDef& def, const Body& body, const ScopePtr& closure, CallArgs& args);

  Value eval(const Expr& e);
  Value lookup(const std::string& name);
  CallArgs eval_args(const CallSpec& spec);
  Value eval_call(const Expr& e, const Value* caller);
  Value apply_filter(const Expr& e, const Value& subject);
  Value slice(const Value& obj, const Expr& slice);
  Value apply_filter_chain(const Expr* chain, const Value& subject);
  void emit(const std::string& s);

  const Program& program_;
  const DictObj& context_;
  Clock clock_;
  RenderLimits limits_;
  ScopePtr root_;
  ScopePtr scope_;
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  int nesting_ = 0;  // exec() and eval() frames live (limits_.max_nesting)
  StackRoom stack_;  // of the rendering thread (limits_.min_stack_left)
  struct Nesting;
  std::unordered_map<std::string, Value> globals_;
  // Broken up when rendering ends: namespaces may hold themselves, and a
  // scope holds the macros that close over it.
  std::vector<std::shared_ptr<NamespaceObj>> namespaces_;
  std::vector<ScopePtr> macro_scopes_;
};

}  // namespace strata::tmpl
