#pragma once
// Internal to the Interpreter (interpreter*.cpp): its variable scopes, and the
// guard that swaps the current scope or output buffer for a while.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/error.h"
#include "template/interpreter.h"

namespace strata::tmpl {

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

// One more statement or expression under evaluation, for the duration of
// the call (RenderLimits::max_nesting).
struct Interpreter::Nesting {
  Interpreter& in;
  explicit Nesting(Interpreter& interpreter) : in(interpreter) {
    if (in.nesting_ >= in.limits_.max_nesting || in.stack_.left() < in.limits_.min_stack_left)
      render_error("maximum recursion depth exceeded: " + std::to_string(in.nesting_) +
                   " statements and expressions nested, macro calls and recursive loops included (limit " +
                   std::to_string(in.limits_.max_nesting) + ", or the thread's stack)");
    ++in.nesting_;
  }
  ~Nesting() { --in.nesting_; }
  Nesting(const Nesting&) = delete;
  Nesting& operator=(const Nesting&) = delete;
};

namespace detail {
// Restores the current scope and output buffer on every exit path.
template <class T>
struct Restore {
  T& slot;
  T saved;
  Restore(T& s, T v) : slot(s), saved(s) { slot = std::move(v); }
  ~Restore() { slot = std::move(saved); }
};
}  // namespace detail

}  // namespace strata::tmpl
