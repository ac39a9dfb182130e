// The Interpreter's setup and budgets: construction, render(), the step,
// size and output limits, and namespaces. The rest is split by job:
// interpreter_statements.cpp, interpreter_calls.cpp (macros, filters,
// tests), interpreter_expressions.cpp, interpreter_access.cpp (attributes,
// items, slices) and interpreter_operators.cpp.
#include "template/interpreter.h"

#include "template/error.h"
#include "template/interpreter_internal.h"

namespace strata::tmpl {

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

}  // namespace strata::tmpl
