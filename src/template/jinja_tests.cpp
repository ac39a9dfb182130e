// jinja2's builtin tests (jinja2/tests.py, 3.1): `x is defined`, `x is
// string`, `x is divisibleby 3`, `x is equalto y`, ...
#include "template/builtins.h"
#include "template/error.h"
#include "template/interpreter.h"
#include "template/text.h"

namespace strata::tmpl {

namespace {

using Args = CallArgs;

Value one(std::string_view name, Args& a) { return bind_args(name, a, {{"other", {}}})[0]; }

bool t_defined(Interpreter&, const Value& v, Args& a) {
  bind_args("defined", a, {});
  return !v.is_undefined();
}
bool t_undefined(Interpreter&, const Value& v, Args& a) {
  bind_args("undefined", a, {});
  return v.is_undefined();
}
bool t_none(Interpreter&, const Value& v, Args& a) {
  bind_args("none", a, {});
  return v.is_none();
}
bool t_boolean(Interpreter&, const Value& v, Args& a) {
  bind_args("boolean", a, {});
  return v.is_bool();
}
bool t_true(Interpreter&, const Value& v, Args& a) {
  bind_args("true", a, {});
  return v.is_bool() && v.as_bool();
}
bool t_false(Interpreter&, const Value& v, Args& a) {
  bind_args("false", a, {});
  return v.is_bool() && !v.as_bool();
}
bool t_integer(Interpreter&, const Value& v, Args& a) {
  bind_args("integer", a, {});
  return v.is_int();
}
bool t_float(Interpreter&, const Value& v, Args& a) {
  bind_args("float", a, {});
  return v.is_float();
}
bool t_number(Interpreter&, const Value& v, Args& a) {
  bind_args("number", a, {});
  return v.is_number();
}
bool t_string(Interpreter&, const Value& v, Args& a) {
  bind_args("string", a, {});
  return v.is_string();
}
bool t_mapping(Interpreter&, const Value& v, Args& a) {
  bind_args("mapping", a, {});
  return v.is_dict();
}
// len(value) and value.__getitem__ both exist (Undefined has both).
bool t_sequence(Interpreter&, const Value& v, Args& a) {
  bind_args("sequence", a, {});
  return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined();
}
// iter(value) works (Undefined and LoopContext iterate).
bool t_iterable(Interpreter&, const Value& v, Args& a) {
  bind_args("iterable", a, {});
  return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined() ||
         (v.is_object() && (v.object().iterable() || v.object().type_name() == "LoopContext"));
}
bool t_callable(Interpreter&, const Value& v, Args& a) {
  bind_args("callable", a, {});
  return v.is_function() || v.is_undefined() || (v.is_object() && v.object().type_name() == "LoopContext");
}
bool t_escaped(Interpreter&, const Value& v, Args& a) {
  bind_args("escaped", a, {});
  return v.safe();
}
bool t_lower(Interpreter&, const Value& v, Args& a) {
  bind_args("lower", a, {});
  return text::str_islower(to_str(v));
}
bool t_upper(Interpreter&, const Value& v, Args& a) {
  bind_args("upper", a, {});
  return text::str_isupper(to_str(v));
}

bool t_odd(Interpreter& in, const Value& v, Args& a) {
  bind_args("odd", a, {});
  return equals(in.binary(BinOp::Mod, v, Value::integer(2)), Value::integer(1));
}
bool t_even(Interpreter& in, const Value& v, Args& a) {
  bind_args("even", a, {});
  return equals(in.binary(BinOp::Mod, v, Value::integer(2)), Value::integer(0));
}
bool t_divisibleby(Interpreter& in, const Value& v, Args& a) {
  const Value num = bind_args("divisibleby", a, {{"num", {}}})[0];
  return equals(in.binary(BinOp::Mod, v, num), Value::integer(0));
}

bool t_filter(Interpreter&, const Value& v, Args& a) {
  bind_args("filter", a, {});
  return v.is_string() && find_filter(v.str()) != nullptr;
}
bool t_test(Interpreter&, const Value& v, Args& a) {
  bind_args("test", a, {});
  return v.is_string() && find_test(v.str()) != nullptr;
}

// `value is other`: identity. None/True/False are singletons, CPython caches
// small ints; shared objects compare by identity.
bool t_sameas(Interpreter&, const Value& v, Args& a) {
  const Value other = one("sameas", a);
  if (v.type() != other.type()) return false;
  switch (v.type()) {
    case Value::Type::None: return true;
    case Value::Type::Bool: return v.as_bool() == other.as_bool();
    case Value::Type::Int: return v.as_int() == other.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    case Value::Type::Undefined:
    case Value::Type::Float: return false;
    default: return v.handle() == other.handle();
  }
}

bool t_in(Interpreter& in, const Value& v, Args& a) {
  return in.compare(CmpOp::In, v, bind_args("in", a, {{"seq", {}}})[0]);
}

#define STRATA_COMPARE_TEST(fn, op)                         \
  bool fn(Interpreter& in, const Value& v, Args& a) {       \
    return in.compare(CmpOp::op, v, one(#op, a));           \
  }
STRATA_COMPARE_TEST(t_eq, Eq)
STRATA_COMPARE_TEST(t_ne, Ne)
STRATA_COMPARE_TEST(t_lt, Lt)
STRATA_COMPARE_TEST(t_le, Le)
STRATA_COMPARE_TEST(t_gt, Gt)
STRATA_COMPARE_TEST(t_ge, Ge)
#undef STRATA_COMPARE_TEST

const TestDef kTests[] = {
    {"!=", t_ne},
    {"<", t_lt},
    {"<=", t_le},
    {"==", t_eq},
    {">", t_gt},
    {">=", t_ge},
    {"boolean", t_boolean},
    {"callable", t_callable},
    {"defined", t_defined},
    {"divisibleby", t_divisibleby},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"escaped", t_escaped},
    {"even", t_even},
    {"false", t_false},
    {"filter", t_filter},
    {"float", t_float},
    {"ge", t_ge},
    {"greaterthan", t_gt},
    {"gt", t_gt},
    {"in", t_in},
    {"integer", t_integer},
    {"iterable", t_iterable},
    {"le", t_le},
    {"lessthan", t_lt},
    {"lower", t_lower},
    {"lt", t_lt},
    {"mapping", t_mapping},
    {"ne", t_ne},
    {"none", t_none},
    {"number", t_number},
    {"odd", t_odd},
    {"sameas", t_sameas},
    {"sequence", t_sequence},
    {"string", t_string},
    {"test", t_test},
    {"true", t_true},
    {"undefined", t_undefined},
    {"upper", t_upper},
};

}  // namespace

const TestDef* find_test(std::string_view name) {
  for (const TestDef& t : kTests)
    if (name == t.name) return &t;
  return nullptr;
}

}  // namespace strata::tmpl
