// Attribute, item and slice access (a.b, a[b], a[b:c:d]) with the sandbox's
// rules: methods before dict items, unsafe dunders, getattr fallback.
#include <algorithm>
#include <optional>

#include "template/builtins.h"
#include "template/error.h"
#include "template/interpreter.h"
#include "template/text.h"

namespace strata::tmpl {

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

}  // namespace strata::tmpl
