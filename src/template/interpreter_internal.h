#pragma once
// Internal to the Interpreter (interpreter*.cpp): its variable scopes, and the
// guard that swaps the current scope or output buffer for a while.
#include <memory>
#include <string>
#include <utility>
#include <vector>

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
