#pragma once
// The names a template can call besides its own macros: jinja2's builtin
// filters and tests (with transformers' tojson), the globals (range, dict,
// namespace, cycler, joiner, and transformers' raise_exception and
// strftime_now), and the Python methods of str, dict, list and tuple that
// templates use ("a".split(), d.items(), d.get(k, v), ...).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "template/value.h"

namespace strata::tmpl {

using FilterFn = Value (*)(Interpreter&, const Value& subject, CallArgs& args);
using TestFn = bool (*)(Interpreter&, const Value& subject, CallArgs& args);

struct FilterDef {
  const char* name;
  FilterFn fn;
};

struct TestDef {
  const char* name;
  TestFn fn;
};

const FilterDef* find_filter(std::string_view name);
const TestDef* find_test(std::string_view name);

// A global function by name (range, dict, namespace, raise_exception, ...).
std::optional<Value> find_global(std::string_view name);

// `self.name` for a str / dict / list / tuple: the bound method, or an
// Undefined that raises SecurityError when called for the methods the
// immutable sandbox forbids (list.append, dict.update, ...); nullopt when
// the type has no such method.
std::optional<Value> find_method(const Value& self, const std::string& name);

// Python-style argument binding for builtins. Each parameter has a name and
// optionally a default; a missing required argument, an unknown keyword or
// too many positional arguments is a TypeError as Python words it.
struct Param {
  const char* name;
  std::optional<Value> def;  // nullopt: required
};
std::vector<Value> bind_args(std::string_view function, CallArgs& args, std::initializer_list<Param> params);

// Python string conversion used by filters: Undefined -> "", str as is.
std::string soft_str(const Value& v);

// jinja2's make_attrgetter: "a.b.0" looked up item by item (getitem first,
// as environment.getitem does).
Value get_attribute_path(Interpreter& in, const Value& item, const Value& attribute);

}  // namespace strata::tmpl
